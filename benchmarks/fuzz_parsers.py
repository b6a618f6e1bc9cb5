"""Fuzz the file parsers (ARPA, WAV, manifest) with >= N hypothesis inputs each and record the
figures: inputs, how many parsed / which named errors, wall time, slowest input, peak memory.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/fuzz_parsers.py --inputs 10000 \
        --out benchmarks/results_fuzz.md

Inputs are random bytes and mutated valid files (``tests/fuzz_inputs.py``). Any exception other
than a named error (a ``ValueError`` subclass of ``AsrDecodeError``) aborts the run with the input.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from fuzz_inputs import (PARSERS, FuzzStats, Workdir, arpa_inputs, manifest_inputs, peak_rss_mb,  # noqa: E402
                         run_one, wav_inputs)


def fuzz_one(name: str, n: int, work: Workdir) -> dict:
    """Run ``n`` hypothesis inputs (at least) through parser ``name``; return its row of figures."""
    stats = FuzzStats()
    cfg = settings(max_examples=n, deadline=None, database=None, derandomize=False,
                   suppress_health_check=list(HealthCheck))
    parse = PARSERS[name]
    if name == "arpa":
        @cfg
        @given(arpa_inputs())
        def run(case):
            fname, data = case
            run_one(parse, work.path / fname, data, stats)
    elif name == "wav":
        @cfg
        @given(wav_inputs())
        def run(data):
            run_one(parse, work.path / "fuzz.wav", data, stats)
    else:
        @cfg
        @given(manifest_inputs())
        def run(data):
            run_one(parse, work.path / "fuzz.jsonl", data, stats)
    t0 = time.perf_counter()
    run()
    wall = time.perf_counter() - t0
    return {"parser": name, "inputs": stats.inputs, "parsed": stats.parsed, "errors": dict(sorted(stats.errors.items())),
            "wall_s": wall, "slowest_s": stats.slowest_s, "max_growth_mb": stats.max_growth_mb,
            "peak_rss_mb": peak_rss_mb()}


def fuzz_all(n: int) -> list[dict]:
    work = Workdir()
    try:
        return [fuzz_one(name, n, work) for name in PARSERS]
    finally:
        work.close()


def markdown(rows: list[dict], n: int) -> str:
    lines = [
        "# Fuzzing the file parsers",
        "",
        f"`OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/fuzz_parsers.py --inputs {n} "
        "--out benchmarks/results_fuzz.md` (Python " + platform.python_version() + ", one thread, shared machine).",
        "Inputs: hypothesis random bytes and mutated valid files (bit flips, byte sets, insertions,",
        "deletions, truncation, duplicated spans; ARPA also gzip-compressed and truncated gzip), see",
        "`tests/fuzz_inputs.py`. Every input parsed or raised a named error (a `ValueError` subclass of",
        "`AsrDecodeError`); no other exception, no hang. \"growth\" is the largest rise of the process's",
        "peak RSS during one input; \"peak RSS\" the process's peak after the parser's run (torch included).",
        "",
        "| parser | inputs | parsed | named errors | wall s | slowest input ms | max growth MiB | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errs = ", ".join(f"{k} {v}" for k, v in r["errors"].items())
        lines.append(f"| {r['parser']} | {r['inputs']} | {r['parsed']} | {errs} | {r['wall_s']:.1f} | "
                     f"{1000 * r['slowest_s']:.1f} | {r['max_growth_mb']:.1f} | {r['peak_rss_mb']:.0f} |")
    lines += [
        "",
        "Found and fixed by this fuzzing: the wave module's bare `RuntimeError` on a RIFF chunk that",
        "seeks past its parent (now: soundfile gets a try, else `FileFormatError`), and `json`'s",
        "`RecursionError` on a deeply nested manifest line (now `FileFormatError` \"nested too deeply\").",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=10_000, help="inputs per parser (default: %(default)s)")
    ap.add_argument("--out", type=Path, help="write the markdown table here")
    args = ap.parse_args()
    rows = fuzz_all(args.inputs)
    text = markdown(rows, args.inputs)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
