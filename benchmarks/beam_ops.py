#!/usr/bin/env python3
"""The transducer beam searches' CPU proxy of a GPU's launch cost: ATen ops per device-loop round and per call.

On demo-rnnt's encoder output of the bundled clips (the inputs of ``benchmarks/gpu.py``'s beam section:
``--batch`` utterances, beam 4, the bundled token 4-gram), each search runs on the CUDA-graph path emulated
on the CPU (:class:`asrdecode.accel.EmulatedGraphRunner`: the in-place wrapper a capture uses, the
cached loop of a warm call). Per search: rounds the loop needed, ATen ops of one round (views included;
about a replay's kernel launches) and of a whole warm call (validation and results included), syncing
ops and host reads of a call, and the best hypotheses identical to the native engine's.

    python benchmarks/beam_ops.py                 # every search, B=32
    python benchmarks/beam_ops.py --only alsd+lm  # one search
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402 (the benchmark's demo inputs)

from asrdecode.accel import EmulatedGraphRunner, count_device_syncs, count_host_reads  # noqa: E402
from asrdecode.transducer import beam as beam_mod  # noqa: E402


def searches(lm: Any, weight: float, beta: float) -> list[tuple[str, dict]]:
    """The searches of ``benchmarks/gpu.py``'s beam section (name, BeamSearchDecoder options)."""
    fused = dict(fusion=[(lm, weight)], beta=beta)
    dense = dict(fusion=[(lm.with_dense_rows(), weight)], beta=beta)  # every LM state a dense row
    return [("alsd+lm", dict(method="alsd", **fused)), ("alsd+dense-lm", dict(method="alsd", **dense)),
            ("aes+lm", dict(method="aes", **fused)),
            ("wind+lm", dict(method="wind", window=8, **fused)), ("alsd", dict(method="alsd")),
            ("wind", dict(method="wind", window=8))]


def same_best(a: list, b: list) -> int:
    """Utterances whose best hypotheses have equal tokens and frames and scores within 1e-4 (relative)."""
    return sum(x[0].tokens == y[0].tokens and x[0].timestamps == y[0].timestamps
               and abs(x[0].score - y[0].score) <= 1e-4 * max(1.0, abs(y[0].score)) for x, y in zip(a, b))


def measure(model: Any, enc: torch.Tensor, lengths: torch.Tensor, options: dict) -> dict:
    """Rounds, ops per round and per warm call, syncs, host reads, and results identical to the native engine."""
    reference = beam_mod.BeamSearchDecoder(model, beam=4, engine="native", **options).decode(enc, lengths)
    dec = beam_mod.BeamSearchDecoder(model, beam=4, acceleration="cuda_graphs", engine="torch", **options)
    with torch.inference_mode():
        out = dec.decode(enc, lengths)  # captures, and learns the rounds per frame (the first check)
        with count_device_syncs() as call, count_host_reads() as reads:
            dec.decode(enc, lengths)
        (loop, run), = dec._loops._entries.values()
        step = run.bound(beam_mod._round, loop)
        with count_device_syncs() as one:
            step()
    return dict(same=same_best(out, reference), rounds=int(loop.busy), round_ops=one.ops, call_ops=call.ops,
                syncs=call.count, reads=reads.count)


def main(argv: Sequence[str] | None = None) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", default="", help="comma-separated search names (default: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    real = beam_mod.resolve_mode  # "cuda_graphs" on the CPU: the graph path, emulated
    beam_mod.resolve_mode = lambda mode, device: "cuda_graphs" if mode == "cuda_graphs" else real(mode, device)
    beam_mod.StepRunner = EmulatedGraphRunner  # type: ignore[misc]
    demo, enc_all, len_all = gpu.demo_outputs("demo-rnnt", None, False)
    enc, lengths = gpu._tile(enc_all, len_all, args.batch)
    enc = enc[:, : int(lengths.max())].contiguous()
    weight, beta = LM_TUNED["demo-rnnt"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                           blank_id=demo.tokenizer.blank_id)
    only = set(filter(None, args.only.split(",")))
    print(f"demo-rnnt, B={args.batch}, {int(lengths.max())} frames max, beam 4 (CPU, emulated CUDA-graph path)")
    print("| search | identical | rounds | ops / round | ops / call | syncs | host reads |")
    print("|---|---|---|---|---|---|---|")
    for name, options in searches(lm, weight, beta):
        if only and name not in only:
            continue
        r = measure(demo.model, enc, lengths, options)
        print(f"| {name} | {r['same']}/{args.batch} | {r['rounds']} | {r['round_ops']} | {r['call_ops']} | "
              f"{r['syncs']} | {r['reads']} |", flush=True)


if __name__ == "__main__":
    main()
