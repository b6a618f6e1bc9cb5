#!/usr/bin/env python3
"""Where a device loop's time goes: kernels, GPU busy time and the top kernels of one warm call.

``benchmarks/gpu.py`` says how fast each search is on a GPU; this says why. For each search (the
inputs and settings of gpu.py's rows: demo-ctc CTC beam 16 with / without the token 4-gram at B=128,
demo-rnnt greedy and ALSD++ / WIND beam 4 + LM at B=32, the WFST TLG at B=128) it times warm calls,
then profiles one call with the PyTorch profiler (CUPTI: the kernels inside CUDA graph replays too)
and reports the wall time, the kernel count, the GPU busy time (the sum of kernel durations), the
mean kernel and the mean gap between kernels, and the kernels that take the most time. A search whose
wall time is its kernel count times ~3 us is launch-bound (fuse or cut ops); one with a few long
kernels is not (look at those: the WFST loop's scatter-max onto one dummy cell was 73 % of its time).

``--ops`` profiles the eager loop instead and groups the time by ATen op and input shapes (which line
of the step a kernel comes from). ``--compiled`` profiles the loops with their ``torch.compile``d rounds
inside the CUDA graphs (:func:`asrdecode.accel.compiled_graphs`: Inductor's fused kernels, the library
kernels it keeps and the pure rounds' write-back); the warm-up call compiles (seconds per search).

    python benchmarks/gpu_profile.py --sections ctc,wfst          # on CUDA
    python benchmarks/gpu_profile.py --sections wfst --ops        # per ATen op, eager
    python benchmarks/gpu_profile.py --compiled                   # compiled rounds inside the graphs
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu as G  # noqa: E402
from asrdecode import ctc  # noqa: E402
from asrdecode.accel import compiled_graphs  # noqa: E402
from asrdecode.transducer import BeamSearchDecoder, GreedyDecoder  # noqa: E402

Call = Callable[[], Any]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def kernel_table(trace: dict, top: int) -> tuple[dict[str, float], list[tuple[str, int, float]]]:
    """Summary (kernels, busy ms, span ms) and the ``top`` kernels ``(name, count, ms)`` of a Chrome trace."""
    kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in kernels:
        per[e["name"][:100]][0] += 1
        per[e["name"][:100]][1] += e.get("dur", 0.0)
    busy = sum(v[1] for v in per.values()) / 1e3
    span = 0.0
    if kernels:
        span = (max(e["ts"] + e.get("dur", 0.0) for e in kernels) - min(e["ts"] for e in kernels)) / 1e3
    rows = sorted(((k, int(c), d / 1e3) for k, (c, d) in per.items()), key=lambda r: -r[2])[:top]
    return {"kernels": float(len(kernels)), "busy_ms": busy, "span_ms": span}, rows


def profile(name: str, call: Call, device: torch.device, args: argparse.Namespace, out: list[str]) -> None:
    """Time ``call`` warm, profile one call, append its markdown to ``out``."""
    for _ in range(2):
        call()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        call()
    _sync(device)
    wall = (time.perf_counter() - t0) / args.repeats * 1e3
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, record_shapes=args.ops) as prof:
        call()
        _sync(device)
    out.append(f"\n### {name}\n")
    if args.ops:
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        table = prof.key_averages(group_by_input_shape=True).table(sort_by=key, row_limit=args.top,
                                                                     max_name_column_width=40,
                                                                     max_shapes_column_width=70)
        out.append(f"wall {wall:.2f} ms / call (warm)\n\n```\n{table}\n```\n")
        return
    if device.type != "cuda":
        out.append(f"wall {wall:.2f} ms / call (warm); kernel timing needs CUDA (use --ops on the CPU)\n")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        summary, rows = kernel_table(json.loads(path.read_text()), args.top)
    n = max(summary["kernels"], 1.0)
    out.append(f"wall {wall:.2f} ms / call (warm); profiled call: {summary['kernels']:.0f} kernels, "
               f"busy {summary['busy_ms']:.2f} ms, span {summary['span_ms']:.2f} ms, mean kernel "
               f"{summary['busy_ms'] / n * 1e3:.2f} us, mean gap {(summary['span_ms'] - summary['busy_ms']) / n * 1e3:.2f} us\n")
    if rows:
        out.append("\n| ms | calls | us each | kernel |\n|---|---|---|---|")
        out += [f"| {ms:.3f} | {c} | {ms / c * 1e3:.2f} | `{k}` |" for k, c, ms in rows]


def ctc_section(device: torch.device, args: argparse.Namespace, out: list[str]) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    demo, lp_all, len_all = G.demo_outputs("demo-ctc", 8 if args.quick else None, ctc_head=True)
    lp_cpu, lengths_cpu = G._tile(lp_all, len_all, args.ctc_batch)
    blank, V = demo.blank_id, lp_cpu.shape[-1]
    weight, beta = LM_TUNED["demo-ctc"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=blank).to(device)
    lp, lengths = lp_cpu.to(device), lengths_cpu.to(device)
    for name, fusion in (("beam 16 + token LM", [(lm, weight)]), ("beam 16", [])):
        dec = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16, fusion=fusion, beta=beta if fusion else 0.0,
                                 engine="torch")
        profile(f"CTC prefix beam, {name}, B={args.ctc_batch}, {int(lengths_cpu.max())} frames",
                lambda dec=dec: dec.decode(lp, lengths), device, args, out)


def transducer_section(device: torch.device, args: argparse.Namespace, out: list[str]) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    demo, enc_all, len_all = G.demo_outputs("demo-rnnt", 8 if args.quick else None, ctc_head=False)
    enc_cpu, lengths_cpu = G._tile(enc_all, len_all, args.beam_batch)
    enc_cpu = enc_cpu[:, : int(lengths_cpu.max())].contiguous()
    weight, beta = LM_TUNED["demo-rnnt"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                           blank_id=demo.tokenizer.blank_id).to(device)
    model = copy.deepcopy(demo.model).to(device)
    enc, lengths = enc_cpu.to(device), lengths_cpu.to(device)
    mode = "cuda_graphs" if device.type == "cuda" else "eager"
    frames = f"B={args.beam_batch}, {int(lengths_cpu.max())} frames"
    greedy = GreedyDecoder(model, acceleration=mode, engine="torch")
    profile(f"greedy label-looping, demo-rnnt, {frames}", lambda: greedy.decode(enc, lengths), device, args, out)
    for name, options in (("ALSD++ beam 4 + LM", dict(method="alsd")), ("WIND beam 4 + LM", dict(method="wind",
                                                                                                  window=8))):
        dec = BeamSearchDecoder(model, beam=4, acceleration=mode, engine="torch", fusion=[(lm, weight)], beta=beta,
                                **options)
        profile(f"{name}, demo-rnnt, {frames}", lambda dec=dec: dec.decode(enc, lengths), device, args, out)


def wfst_section(device: torch.device, args: argparse.Namespace, out: list[str]) -> None:
    from asrdecode.ctc.wfst import WFSTDecoder

    demo, lp_all, len_all = G.demo_outputs("demo-ctc", 8 if args.quick else None, ctc_head=True)
    graph = G._wfst_graph(demo, args.wfst_words)
    lp_cpu, lengths_cpu = G._tile(lp_all, len_all, args.ctc_batch)
    dec = WFSTDecoder(graph, engine="torch", loop="fixed", beam=12.0, max_active=2000, acoustic_scale=2.0)
    lp, lengths = lp_cpu.to(device), lengths_cpu.to(device)
    if args.ops:
        from asrdecode.ctc.wfst import fixed
        fixed.resolve_mode = lambda mode, device: "eager"  # per-op times need the eager loop
    profile(f"WFST TLG ({args.wfst_words} words, {graph.num_states} states, {graph.num_arcs} arcs), beam 12, "
            f"max_active 2000, B={args.ctc_batch}", lambda: dec(lp, lengths), device, args, out)


SECTIONS = {"ctc": ctc_section, "transducer": transducer_section, "wfst": wfst_section}


def main(argv: Sequence[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    ap.add_argument("--ops", action="store_true", help="eager loops, time by ATen op and input shapes")
    ap.add_argument("--compiled", action="store_true",
                    help="the torch.compile'd rounds inside the CUDA graphs (CUDA only; the warm-up compiles)")
    ap.add_argument("--quick", action="store_true", help="8 clips, small batches (a smoke run)")
    ap.add_argument("--ctc-batch", type=int, default=128)
    ap.add_argument("--beam-batch", type=int, default=32)
    ap.add_argument("--wfst-words", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--top", type=int, default=15, help="kernels (or ops) listed per search")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks/latest"))
    args = ap.parse_args(argv)
    if args.quick:
        args.ctc_batch, args.beam_batch, args.wfst_words, args.repeats = 8, 4, 100, 1
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    device = torch.device(args.device)
    if args.compiled and (args.ops or device.type != "cuda"):
        ap.error("--compiled profiles the compiled rounds inside CUDA graphs: it needs a CUDA device and no --ops")
    torch.set_grad_enabled(False)
    kind = " (compiled rounds inside the CUDA graphs)" if args.compiled else ""
    out = [f"# Device-loop profile{kind}: {G.device_name(device)}"]
    with compiled_graphs() if args.compiled else nullcontext():
        for name in args.sections.split(","):
            SECTIONS[name](device, args, out)
    text = "\n".join(out) + "\n"
    path = Path(args.out_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / ("gpu_profile_compiled.md" if args.compiled else "gpu_profile.md")).write_text(text)
    print(text, flush=True)
    return text


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
