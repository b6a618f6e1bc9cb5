"""benchmarks/gpu.py's CPU smoke run (``--device cpu --quick``): every section runs, every row's
device result is identical to the CPU reference (here the tensor engine against the native one),
and the table and JSON are written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_benchmark_quick_on_cpu(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    report = gpu.main(["--device", "cpu", "--quick", "--out-dir", str(tmp_path), "--budget-s", "600"])
    sections = {r.section.split(" (")[0] for r in report.rows}
    assert {"greedy RNN-T", "greedy TDT", "transducer beam", "CTC prefix beam", "WFST TLG"} <= sections
    compared = [r for r in report.rows if r.identical]
    assert len(compared) >= 15
    for row in compared:
        same, total = row.identical.split("/")
        assert same == total, (row.section, row.name, row.identical)
        assert row.seconds > 0 and row.ratio is not None and row.ratio > 0
    floors = [r for r in report.rows if r.name.startswith("network floor")]
    assert len(floors) == 2 and all("U=" in r.note and r.note != "U=0" for r in floors)
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["device"].startswith("CPU") and len(data["rows"]) == len(report.rows)
    assert "| section |" in (tmp_path / "gpu.md").read_text()


def test_gpu_profile_kernel_table_sums_a_trace():
    """benchmarks/gpu_profile.py's kernel summary: counts, busy time, span, the top kernels by time."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_profile
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    trace = {"traceEvents": [
        {"cat": "kernel", "name": "gather", "ts": 0.0, "dur": 40.0},
        {"cat": "kernel", "name": "add", "ts": 50.0, "dur": 2.0},
        {"cat": "kernel", "name": "gather", "ts": 60.0, "dur": 40.0},
        {"cat": "cpu_op", "name": "aten::gather", "ts": 0.0, "dur": 500.0},
    ]}  # fmt: skip
    summary, rows = gpu_profile.kernel_table(trace, top=1)
    assert summary == pytest.approx({"kernels": 3.0, "busy_ms": 0.082, "span_ms": 0.1})
    assert [(name, calls) for name, calls, _ in rows] == [("gather", 2)]
    assert rows[0][2] == pytest.approx(0.08)


@pytest.mark.parametrize("argv", [["--device", "cpu", "--compiled"],
                                  ["--device", "cpu", "--compiled", "--ops"]], ids=["cpu", "ops"])
def test_gpu_profile_compiled_needs_cuda_graphs(argv, capsys):
    """``--compiled`` profiles compiled rounds inside CUDA graphs: refused on the CPU and with ``--ops``
    (eager per-op times), before any model is loaded."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_profile
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with pytest.raises(SystemExit) as exc:
        gpu_profile.main(argv)
    assert exc.value.code == 2
    assert "--compiled" in capsys.readouterr().err
