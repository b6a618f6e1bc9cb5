"""Transducer greedy decoding's device-resident loops on the CPU: host reads, syncing ops and ATen ops per
call (``asrdecode.accel`` counters) and the eager ``engine="torch"`` time, for label-looping RNN-T and TDT,
WIND (window 8) and frame-looping.

    OMP_NUM_THREADS=1 python benchmarks/greedy_device_loop.py [--frames 150] [--batches 8 32] [--repeats 5]
        [--model paper|small]

``paper``: the paper-sized model of benchmarks/paper_model.py (float32); ``small``: a random LSTM model of
tests/transducer_models.py (float64). Reads and syncs are counted over the whole ``greedy(...)`` call,
validation included; times are the minimum of ``--repeats`` interleaved runs (one thread).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from paper_model import make_encoder_output, make_paper_model  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.accel import count_device_syncs, count_host_reads  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402

SETTINGS = {  # name -> (TDT model?, greedy options)
    "labels": (False, {"loop": "labels"}),
    "labels TDT": (True, {"loop": "labels"}),
    "WIND w=8": (False, {"loop": "labels", "window": 8}),
    "frames": (False, {"loop": "frames"}),
    "frames TDT": (True, {"loop": "frames"}),
}


def models(kind: str) -> dict[bool, torch.nn.Module]:
    if kind == "paper":
        return {False: make_paper_model(seed=0), True: make_paper_model(seed=0, tdt=True)}
    from transducer_models import random_model

    return {False: random_model(0, 30, 0, None, blank_bias=2.7, enc_dim=16),
            True: random_model(0, 30, 0, [0, 1, 2, 3, 4], blank_bias=1.0, enc_dim=16)}


def inputs(kind: str, batch: int, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    if kind == "paper":
        return make_encoder_output(batch, frames, seed=batch)
    enc = torch.randn(batch, frames, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(batch))
    return enc, torch.full((batch,), frames, dtype=torch.long)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--model", choices=["paper", "small"], default="paper")
    args = p.parse_args()
    single_thread()
    nets = models(args.model)
    rows = []
    for B in args.batches:
        enc, lengths = inputs(args.model, B, args.frames)
        calls = {}
        for name, (tdt, opts) in SETTINGS.items():
            model = nets[tdt]
            calls[name] = (lambda m=model, o=opts, x=enc, n=lengths: greedy(m, x, n, engine="torch", **o))
        times = time_many(calls, repeats=args.repeats, stat="min")
        for name, fn in calls.items():
            with count_host_reads() as reads, count_device_syncs() as syncs:
                hyps = fn()
            labels = sum(len(h.tokens) for h in hyps) / float(lengths.sum())
            rows.append([B, name, reads.count, syncs.count, syncs.ops, round(labels, 3), times[name] * 1e3,
                         times["frames"] / times[name]])
    print(markdown_table(["B", "decoder", "host reads", "syncs", "aten ops", "labels/frame", "ms", "x frames"], rows))


if __name__ == "__main__":
    main()
