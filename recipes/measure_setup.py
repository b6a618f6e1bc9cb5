"""Measure the README's two set-up commands from a fresh clone and write the times into README.md.

    python3 recipes/measure_setup.py            # clone HEAD, time `make demo` then `make test`, update README.md
    python3 recipes/measure_setup.py --dry-run  # print the README sections instead of writing them
    python3 recipes/measure_setup.py --from-run DIR  # render the sections again from a kept run's logs

A new user's first run: a `git clone` of the committed HEAD into a temporary folder, an empty model /
graph cache (``ASRDECODE_CACHE``), ``OMP_NUM_THREADS=1``. ``make demo`` builds the venv, installs the
package, builds phone-ctc's graph and the demo graph, decodes and prints its table; ``make test`` then
installs the test extras, runs ruff + mypy and the pytest suite. Reported: wall time of each command,
the pytest run's own time (its closing line), each graph the first run built (time, file size and peak
memory, from the graph cache's records) and the machine's cores; and the demo's own WER / RTFx table.
The README sections between the ``setup-times`` and ``demo-table`` markers are replaced; nothing else
is touched.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- setup-times:begin -->", "<!-- setup-times:end -->"
TABLE_BEGIN, TABLE_END = "<!-- demo-table:begin -->", "<!-- demo-table:end -->"
_ROW = re.compile(r"^\W*(phone-ctc|demo-rnnt|demo-tdt|demo-ctc)\s*[│|]\s*(.+?)\s*[│|]\s*([\d.]+|-)\s*[│|]\s*([\d.]+|-)"
                  r"\s*[│|]\s*([\d,]+|-)\s*[│|]\s*([\d.]+|-)")


def run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, str]:
    """Run ``cmd`` (output to ``log`` and returned); its wall seconds. Raises if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}) after {seconds:.0f} s; log {log}\n{tail}")
    return seconds, proc.stdout


def pytest_seconds(output: str) -> tuple[str, float]:
    """pytest's closing line (``N passed, M skipped in S s``) and its seconds."""
    for line in reversed(output.splitlines()):
        m = re.search(r"(\d+ passed.*?) in ([\d.]+)s", line)
        if m:
            return m.group(1).strip("= "), float(m.group(2))
    raise SystemExit("no pytest closing line in make test's output")


def graph_records(cache: Path) -> list[dict]:
    """The graph cache's records of the graphs the run built (name, build seconds, size, peak memory)."""
    out = []
    for rec in sorted((cache / "graphs").glob("*.json")):
        info = json.loads(rec.read_text(encoding="utf-8"))
        out.append({"name": rec.stem.rsplit("-", 1)[0], "seconds": info["build_seconds"],
                    "mb": info["size"] / 2**20, "peak_mb": info["peak_rss_mb"]})
    return out


def demo_rows(output: str) -> list[tuple[str, ...]]:
    """The demo table's rows: (model, decoder, WER synth, WER real, decoder RTFx, x baseline)."""
    return [tuple(m.groups()) for m in map(_ROW.match, output.splitlines()) if m]


def setup_section(r: dict) -> str:
    graphs = "; ".join(f"{g['name']} {g['seconds']:.0f} s, {g['mb']:.0f} MB, peak {g['peak_mb'] / 1024:.1f} GB"
                       for g in r["graphs"]) or "none (cached)"
    return "\n".join([
        BEGIN,
        f"Measured by `python3 recipes/measure_setup.py` from a fresh clone of {r['commit']} on {r['date']} "
        f"({r['cores']} cores, one thread, empty model / graph caches; pip's download cache was warm):",
        "",
        "| command | wall time | of which |",
        "|---|---|---|",
        f"| `make demo` | {r['demo_s'] / 60:.1f} min | venv + install, graph builds, decoding |",
        f"| `make test` | {r['test_s'] / 60:.1f} min | test extras, ruff + mypy, pytest {r['pytest_s'] / 60:.1f} min "
        f"({r['tests']}) |",
        "",
        f"Graphs the first `make demo` builds and caches (build time, file, peak memory): {graphs}.",
        END,
    ])


def table_section(r: dict) -> str:
    rows = [f"| {m} | {d} | {real} | {synth} | {rtfx} | {ratio} |" for m, d, synth, real, rtfx, ratio in r["rows"]]
    return "\n".join([
        TABLE_BEGIN,
        f"`make demo`'s table from the same run ({r['commit']}, {r['date']}): WER (%) on the 10 real clips of "
        "`data/real` and the 50 synthetic utterances of `data/synth_test`, decoder-only RTFx and its ratio "
        "to the family's first row:",
        "",
        "| model | decoding | WER real | WER synth | decoder RTFx | x first row |",
        "|---|---|---|---|---|---|",
        *rows,
        TABLE_END,
    ])


def measure(tmp: Path, commit: str) -> None:
    """Clone ``ROOT``'s HEAD into ``tmp`` and run the two set-up commands there (logs in ``tmp``)."""
    clone, cache = tmp / "asrdecode", tmp / "cache"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="1", ASRDECODE_CACHE=str(cache))
    print(f"fresh clone of {commit} in {clone}; timing make demo ...", file=sys.stderr, flush=True)
    demo_s, _ = run(["make", "demo"], clone, env, tmp / "demo.log")
    print(f"make demo: {demo_s:.0f} s; timing make test ...", file=sys.stderr, flush=True)
    test_s, _ = run(["make", "test"], clone, env, tmp / "test.log")
    (tmp / "times.json").write_text(json.dumps({"commit": commit, "date": dt.date.today().isoformat(),
                                                "cores": os.cpu_count(), "demo_s": demo_s, "test_s": test_s}))


def results(tmp: Path) -> dict:
    """What a run in ``tmp`` measured (its times.json, logs and graph cache)."""
    r = json.loads((tmp / "times.json").read_text(encoding="utf-8"))
    r["tests"], r["pytest_s"] = pytest_seconds((tmp / "test.log").read_text(encoding="utf-8"))
    r["graphs"] = graph_records(tmp / "cache")
    r["rows"] = demo_rows((tmp / "demo.log").read_text(encoding="utf-8"))
    if not r["rows"]:
        raise SystemExit(f"no demo table rows in {tmp / 'demo.log'}")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the README sections, do not write them")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its logs (the folder is printed)")
    ap.add_argument("--from-run", type=Path, metavar="DIR", help="render from a kept run instead of measuring")
    args = ap.parse_args(argv)
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    for a, b in ((BEGIN, END), (TABLE_BEGIN, TABLE_END)):
        if a not in text or b not in text:
            raise SystemExit(f"README.md has no {a} ... {b} section to replace")
    if args.from_run is not None:
        tmp = args.from_run
    else:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        tmp = Path(tempfile.mkdtemp(prefix="asrdecode-setup-"))
        measure(tmp, commit)
    r = results(tmp)
    print(f"make demo {r['demo_s']:.0f} s, make test {r['test_s']:.0f} s (pytest {r['pytest_s']:.0f} s: "
          f"{r['tests']})", file=sys.stderr)
    sections = ((BEGIN, END, setup_section(r)), (TABLE_BEGIN, TABLE_END, table_section(r)))
    if args.dry_run:
        print("\n\n".join(s for _, _, s in sections))
    else:
        for a, b, sec in sections:
            text = re.sub(re.escape(a) + r".*?" + re.escape(b), lambda _, sec=sec: sec, text, flags=re.S)
        readme.write_text(text, encoding="utf-8")
        print(f"wrote the set-up times and the demo table into {readme}", file=sys.stderr)
    if args.keep or args.from_run is not None:
        print(tmp)
    else:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
