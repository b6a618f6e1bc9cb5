#!/usr/bin/env python3
"""The WFST fixed-shape device loop's work per frame, with and without acoustic pre-pruning (CPU proxies).

On demo-ctc's log-probs of the bundled clips tiled to ``--batch`` utterances, and the TLG (compact) of
the bundled word 3-gram pruned to ``--words`` words (``benchmarks/gpu.py``'s WFST section: beam 12,
max_active 2000, acoustic scale 2), the tensor engine's fixed loop (``loop="fixed"``, the loop CUDA
graphs capture) runs three times in one process: every arc of every token expanded (``dense_min_degree``
out of reach: no dense rows, the loop before pre-pruning), pre-pruned (the default) and pre-pruned with
the epsilon passes over a budget of candidates instead of dense rows (``fixed.DENSE_EPSILON_DEGREE``).
Per variant: the capacities it settled on (slots ``K``, winner rows ``C``, arc budget ``M``, item
budget ``M1``) and the most each frame needed; per frame of a warm call, ATen ops (views included; in
brackets the others: a GPU's kernel launches), the elements read or written at data-dependent indices (gathers, scatters, searchsorted: a GPU's
random memory accesses) and the bytes the ops write (the memory traffic of the big arrays); the
warm call's CPU time (one thread, the best of ``--repeats``, the variants' calls interleaved); results identical
to the native engine.

    OMP_NUM_THREADS=1 python benchmarks/wfst_fixed_work.py            # B=128, 2000 words
    OMP_NUM_THREADS=1 python benchmarks/wfst_fixed_work.py --batch 32 --words 500
    OMP_NUM_THREADS=1 python benchmarks/wfst_fixed_work.py --compiled  # + Inductor kernels per compiled frame
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402 (the GPU benchmark's demo inputs and graph)

from asrdecode.ctc.wfst import WFSTDecoder, fixed  # noqa: E402

OPTIONS = dict(beam=12.0, max_active=2000, acoustic_scale=2.0)
#: data-dependent reads and writes (each element a random memory access on a GPU, latency rather than
#: bandwidth: the recombination scratch alone is ``B * S`` int64, 164 MB here)
GATHERS = {"index_select", "gather", "searchsorted", "index"}
SCATTERS = {"scatter_", "scatter_reduce_", "index_fill_", "index_copy_", "index_put_", "scatter", "scatter_reduce"}


class OpBytes(TorchDispatchMode):
    """Counts ATen ops and the bytes they write: their new outputs (not views of an input), for an in-place op
    its largest tensor argument after the first (``index_copy_``'s source, ``scatter_``'s index), else
    the buffer itself (``fill_``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.launches = 0  # ops that are not views (about a GPU's kernel launches)
        self.bytes = 0
        self.largest = 0
        self.indexed = 0
        self.by_name: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        self.launches += not func.is_view
        self.by_name[func.__name__] = self.by_name.get(func.__name__, 0) + 1
        base = func.__name__.split(".")[0]
        if base in GATHERS and isinstance(out, torch.Tensor):
            self.indexed += out.numel()
        elif base in SCATTERS:
            self.indexed += max(t.numel() for t in args[1:] if isinstance(t, torch.Tensor))
        if func.__name__.split(".")[0].endswith("_"):  # in place: what it writes, not the whole buffer
            sizes = [_nbytes(t) for t in args[1:] if isinstance(t, torch.Tensor)] or [_nbytes(args[0])]
        else:
            inputs = {t.untyped_storage().data_ptr() for t in args if isinstance(t, torch.Tensor)}
            sizes = [_nbytes(t) for t in (out if isinstance(out, (tuple, list)) else (out,))
                     if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs]
        self.bytes += sum(sizes)
        self.largest = max([self.largest, *sizes])
        return out


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def same_words(a: list, b: list) -> int:
    return sum([w for w, _, _ in x.words] == [w for w, _, _ in y.words] for x, y in zip(a, b))


def compiled_calls(loop: Any) -> tuple[float, float]:
    """One round of ``loop`` compiled (fullgraph, as ``acceleration="compile"`` compiles it): the calls its
    generated code makes per frame, Inductor's kernels (on a GPU each a Triton launch) and the library
    kernels and ATen fallbacks it keeps (sorts, scans, scatters)."""
    torch._dynamo.reset()
    fn = torch.compile(fixed._round, dynamic=False, fullgraph=True)
    with torch.inference_mode():
        loop.t.zero_()  # (the warm call left the counter at the end of the frames)
        _, codes = run_and_get_code(fn, loop)
    body = "\n".join(code.split("def call(", 1)[1].split("\ndef ", 1)[0] for code in codes)
    kernels = len(re.findall(r"^\s+cpp_fused_\w+\(", body, re.M)) + len(re.findall(r"^\s+triton_\w+\.run\(", body, re.M))
    library = len(re.findall(r"(?:extern_kernels|aten|torch\.ops\.\w+)\.\w+(?:\.\w+)?\(", body))
    return kernels / fixed.UNROLL, library / fixed.UNROLL


class Variant:
    """A variant's decoder (the loop CUDA graphs capture, on the CPU), called with its epsilon layout: dense rows
    (the default for this TLG's epsilon degree) or, ``eps_budget``, a budget of candidates."""

    def __init__(self, graph: Any, eps_budget: bool = False, **extra: Any) -> None:
        self.dec = WFSTDecoder(graph, engine="torch", loop="fixed", **OPTIONS, **extra)
        self.eps_budget = eps_budget

    def __call__(self, lp: torch.Tensor, lens: torch.Tensor) -> list:
        layout = getattr(fixed, "epsilon_layout", None)  # (absent in a revision before the dense layout)
        with layout(dense=False) if layout is not None and self.eps_budget else contextlib.nullcontext():
            return self.dec(lp, lens)


def prepare(graph: Any, **extra: Any) -> Variant:
    return Variant(graph, **extra)


def measure(dec: Any, lp: torch.Tensor, lens: torch.Tensor, reference: list, seconds: float, compiled: bool) -> dict:
    """One variant after the timing: capacities, ops and bytes per frame of a warm call, identical results."""
    with torch.inference_mode():
        out = dec(lp, lens)
        with OpBytes() as count:
            dec(lp, lens)
    loop = [lp_ for lp_ in fixed.LOOPS._entries.values() if getattr(lp_, "flags", None)][-1]
    frames = int(lens.max())
    kernels = compiled_calls(loop) if compiled else None
    return dict(kernels=kernels, K=loop.K, C=loop.C, M=loop.M, M1=getattr(loop, "M1", 0), need=loop.flags[1:],
                pre=getattr(loop, "pre", False),  # (a revision before pre-pruning runs this script too)
                ops=count.ops / frames, launches=count.launches / frames, mb=count.bytes / frames / 2**20, largest=count.largest / 2**20,
                indexed=count.indexed / frames,
                seconds=seconds, same=same_words(out, reference),
                by_name={k: v / frames for k, v in count.by_name.items()})


def timings(decs: list, lp: torch.Tensor, lens: torch.Tensor, repeats: int) -> list[float]:
    """Each decoder's best warm call (CPU process time), the calls interleaved (a, b, a, b, ...) so that a
    machine's slow spell or the first large allocations do not fall on one of them."""
    best = [float("inf")] * len(decs)
    with torch.inference_mode():
        for dec in decs:
            dec(lp, lens)  # warm-up: capacities grow (reruns), buffers allocated
        for _ in range(repeats):
            for i, dec in enumerate(decs):
                t0 = time.process_time()
                dec(lp, lens)
                best[i] = min(best[i], time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--words", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compiled", action="store_true",
                    help="also compile one round of each variant's loop and count its kernels per frame (minutes)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo, lp_all, len_all = gpu.demo_outputs("demo-ctc", None, ctc_head=True)
    graph = gpu._wfst_graph(demo, args.words)
    lp, lens = gpu._tile(lp_all, len_all, args.batch)
    with torch.inference_mode():
        reference = WFSTDecoder(graph, engine="native", **OPTIONS)(lp, lens)
    names = ["every arc", "pre-pruned (default)", "pre-pruned, epsilon budget"]
    decs = [prepare(graph, dense_min_degree=10**9), prepare(graph), prepare(graph, eps_budget=True)]
    fixed.LOOPS.clear()
    best = timings(decs, lp, lens, args.repeats)
    rows = []
    for name, dec, seconds in zip(names, decs, best):
        fixed.LOOPS.clear()  # (the variant's own loop is the last one made)
        rows.append((name, measure(dec, lp, lens, reference, seconds, args.compiled)))
    print(f"WFST fixed loop, demo-ctc, TLG {args.words} words ({graph.num_states} states, {graph.num_arcs} arcs), "
          f"B={args.batch}, {int(lens.max())} frames, beam 12, max_active 2000\n")
    print("| expansion | K / C | M (arcs) | M1 (items) | most arcs / items a frame | ops / frame (not views) "
          "| indexed elements / frame | MB written / frame | largest op output (MB) | CPU s / call | identical to native |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        need = r["need"]
        print(f"| {name} | {r['K']} / {r['C']} | {r['M']} | {r['M1'] or '-'} | "
              f"{need[0]} / {need[2] if r['pre'] else '-'} | {r['ops']:.0f} ({r['launches']:.0f}) | {r['indexed'] / 1e6:.2f} M | {r['mb']:.1f} | {r['largest']:.1f} | "
              f"{r['seconds']:.2f} | {r['same']}/{len(reference)} |")
    if args.compiled:
        print("\n| expansion | compiled round: Inductor kernels + library calls / frame | eager ATen ops / frame |")
        print("|---|---|---|")
        for name, r in rows:
            k, lib = r["kernels"]
            print(f"| {name} | {k:.1f} + {lib:.1f} = {k + lib:.1f} | {r['ops']:.0f} |")
    a, b = rows[0][1], rows[1][1]
    if os.environ.get("WFST_WORK_OPS"):
        for k in sorted(set(a["by_name"]) | set(b["by_name"])):
            print(k, round(a["by_name"].get(k, 0), 1), round(b["by_name"].get(k, 0), 1))
    print(f"\npre-pruned / every arc: ops per frame {b['ops'] / a['ops']:.2f}x, indexed elements "
          f"{b['indexed'] / a['indexed']:.2f}x, bytes per frame "
          f"{b['mb'] / a['mb']:.2f}x, CPU time {b['seconds'] / a['seconds']:.2f}x")


if __name__ == "__main__":
    main()
