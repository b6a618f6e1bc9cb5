"""A short run of the native fuzz harness (benchmarks/fuzz_native.py) on the normal build: every entry
point, random and mutated inputs, every outcome a result or a named error. The full run (100k cases,
AddressSanitizer + UBSan) is ``make test-asan``."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from asrdecode.errors import AsrDecodeError
from asrdecode.native import _lib

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_every_entry_point_gives_a_result_or_a_named_error():
    import fuzz_native

    rng = random.Random(7)
    torch.manual_seed(7)
    pools = fuzz_native.Pools(rng)
    seen: dict = {}
    for i in range(270):
        name = list(fuzz_native.ENTRIES)[i % len(fuzz_native.ENTRIES)]
        try:
            fuzz_native.ENTRIES[name](rng, pools)
            outcome = "result"
        except AsrDecodeError:
            outcome = "named error"
        seen.setdefault(name, set()).add(outcome)
    assert set(seen) == set(fuzz_native.ENTRIES)
    assert all("result" in v for v in seen.values())  # the cases are not all refused
