"""Run every benchmark and the tests marked slow (`make bench`), one thread, and write each one's output to benchmarks/latest/.

Benchmarks that compare with NeMo run under the NeMo virtual environment (`make nemo`, or
$ASRDECODE_NEMO_PYTHON) and are skipped with a note when it is missing. The curated tables
live in benchmarks/RESULTS.md, each with the command that produced it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def nemo_python() -> str | None:
    for candidate in (os.environ.get("ASRDECODE_NEMO_PYTHON"), ROOT / "work/venvs/nemo/bin/python", "/work/venvs/nemo/bin/python"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return None


def main() -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    nemo = nemo_python()
    jobs: list[tuple[str, list[str]]] = [
        ("greedy_rnnt", [sys.executable, "benchmarks/greedy_speed.py"]),
        ("greedy_tdt", [sys.executable, "benchmarks/greedy_speed.py", "--tdt"]),
        ("ctc_beam", [sys.executable, "benchmarks/ctc_beam.py"]),
        ("transducer_beam", [sys.executable, "benchmarks/transducer_beam.py"]),
        ("transducer_beam_wind", [sys.executable, "benchmarks/transducer_beam.py", "--wind"]),
        ("ctc_wfst", [sys.executable, "benchmarks/ctc_wfst.py"]),
        ("wfst_phone", [sys.executable, "benchmarks/wfst_phone.py"]),
        ("word_lm_load", [sys.executable, "benchmarks/word_lm_load.py"]),
        ("phone_beam", [sys.executable, "benchmarks/phone_beam.py"]),
        ("stream_frontend", [sys.executable, "benchmarks/stream_frontend.py"]),
        ("stream_latency", [sys.executable, "benchmarks/stream_latency.py", "--old"]),
        ("serving", [sys.executable, "benchmarks/serving.py", "--quick"]),
        ("distributed", [sys.executable, "benchmarks/distributed.py"]),
        ("cli_bench", [sys.executable, "-m", "asrdecode.cli", "bench", "--out", "benchmarks/latest/plots"]),
        ("vs_sherpa", [sys.executable, "benchmarks/vs_sherpa.py"]),
        ("sherpa_export", [sys.executable, "benchmarks/sherpa_export.py"]),
        # the tests marked slow (peer comparisons, long cases) that `make test` leaves out
        ("slow_tests", [sys.executable, "-m", "pytest", "-m", "slow", "-q", "tests"]),
    ]
    if nemo:
        jobs += [
            ("greedy_vs_nemo", [nemo, "benchmarks/greedy_vs_nemo.py", "--tdt"]),
            ("lm_ngram", [nemo, "benchmarks/lm_ngram.py"]),
        ]
    else:
        print("NeMo venv not found (run `make nemo`): skipping greedy_vs_nemo and the NeMo columns of lm_ngram")
        jobs.append(("lm_ngram", [sys.executable, "benchmarks/lm_ngram.py"]))
    out_dir = HERE / "latest"
    out_dir.mkdir(exist_ok=True)
    failed = []
    for name, cmd in jobs:
        if cmd[1] != "-m" and not (ROOT / cmd[1]).exists():
            print(f"== {name}: {cmd[1]} not present, skipped")
            continue
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        (out_dir / f"{name}.txt").write_text(proc.stdout + proc.stderr)
        print(proc.stdout)
        if proc.returncode != 0:
            failed.append(name)
            print(proc.stderr[-2000:], file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
