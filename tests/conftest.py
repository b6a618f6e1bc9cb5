import os
import sys
import tempfile
from pathlib import Path

# One thread unless OMP_NUM_THREADS says otherwise: the suite must pass with 1 and with 2 threads
# (`OMP_NUM_THREADS=2 python -m pytest`), so float results are never compared bit for bit.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The CLI's default model is phone-ctc when hama is installed: tests that use the default get a
# small decoding graph (seconds to build) in a cache folder of their own, never the user's.
os.environ["ASRDECODE_PHONE_WORDS"] = "500"
os.environ["ASRDECODE_CACHE"] = tempfile.mkdtemp(prefix="asrdecode-test-cache-")

import torch  # noqa: E402

# Tests live in one folder per package module (tests/ctc, tests/lm, ...) and import each other and the
# shared helpers here by bare module name: every folder goes on sys.path (pytest adds only a file's own).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite_paths  # noqa: E402

suite_paths.add_to_sys_path()

torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"] or 1)))

# `make triton-cpu`: torch.compile on the CPU writes Triton kernels (its GPU code) that Triton's interpreter runs
import triton_on_cpu  # noqa: E402

triton_on_cpu.enable_from_environment()


def pytest_collection_modifyitems(config, items):  # noqa: ARG001 - pytest hook signature
    """Tests marked ``cuda`` run where a CUDA device is present and are skipped elsewhere."""
    import pytest

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
