"""Timing helpers for benchmarks: one thread, warm-up, interleaved repeats, median."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def single_thread() -> None:
    torch.set_num_threads(1)


def time_many(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
              stat: str = "median") -> dict[str, float]:
    """Median (or, ``stat="min"``, fastest) wall time of each function; repeats are interleaved so load
    changes hit all alike. The minimum suits a loaded machine: a sample is only ever slowed by load."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    pick = min if stat == "min" else statistics.median
    return {name: pick(s) for name, s in samples.items()}


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    def fmt(x: object) -> str:
        return f"{x:.3g}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)
