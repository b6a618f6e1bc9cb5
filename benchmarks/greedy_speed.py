"""Transducer greedy decoding speed, decoder only, ratios measured in one run.

On the paper-sized model (benchmarks/paper_model.py), T frames, batch sizes 1/4/16/32:
frame-looping (Algorithm 2) vs label-looping (Algorithm 3), label-looping with WIND window 8,
precomputed projections on vs off, and overhead = decode time / network-work bound (the same
encoder projection, prediction-network steps and longest chain of joint evaluations -- T+U for
RNN-T, the decisions actually taken for TDT -- done as bare batched matrix products).

    OMP_NUM_THREADS=1 python benchmarks/greedy_speed.py [--frames 150] [--tdt] [--repeats 5]

The tensor engine throughout (engine="torch"): the loops compared are its own; benchmarks/greedy_engines.py
compares it with the native engine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_model import make_encoder_output, make_paper_model  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.transducer import greedy, reference_greedy  # noqa: E402

MAX_SYMBOLS = 10  # as NeMo's default; random-weight models can otherwise emit without end


@torch.inference_mode()
def network_bound(model, enc: torch.Tensor, labels: int, joints: int) -> None:
    """The network work of greedy decoding with nothing else: projection, U predictions, the joints.

    ``joints`` is the longest chain of joint evaluations of any utterance (each on the whole batch).
    """
    B = enc.shape[0]
    enc_proj = model.project_encoder(enc)
    state = model.initial_state(B)
    tokens = torch.zeros(B, dtype=torch.long)
    dec, state = model.predict(tokens, state)
    dec_proj = model.project_decoder(dec)
    for _ in range(labels):
        dec, state = model.predict(tokens, state)
        dec_proj = model.project_decoder(dec)
    frame = enc_proj[:, 0]
    for _ in range(joints):
        model.joint(frame, dec_proj).max(dim=-1)


def count_decisions(model, enc: torch.Tensor, lengths: torch.Tensor) -> list[int]:
    """Joint evaluations the exact greedy needs per utterance (T + U for RNN-T; fewer for TDT, which skips frames)."""
    calls = 0
    joint = model.joint

    def counting(*args):
        nonlocal calls
        calls += 1
        return joint(*args)

    counts = []
    model.joint = counting
    try:
        for b in range(enc.shape[0]):
            calls = 0
            reference_greedy(model, enc[b, : int(lengths[b])], max_symbols=MAX_SYMBOLS)
            counts.append(calls)
    finally:
        del model.joint
    return counts


def run(frames: int, batches: list[int], tdt: bool, repeats: int) -> str:
    single_thread()
    model = make_paper_model(seed=0, tdt=tdt)
    rows = []
    for B in batches:
        enc, lengths = make_encoder_output(B, frames, seed=B)
        hyps = greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS)
        U = [len(h.tokens) for h in hyps]
        lpf = sum(U) / float(lengths.sum())
        joints = max(count_decisions(model, enc, lengths))
        fns = {
            "frames": lambda enc=enc, lengths=lengths: greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, loop="frames"),
            "labels": lambda enc=enc, lengths=lengths: greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, loop="labels"),
            "labels_noproj": lambda enc=enc, lengths=lengths: greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, precompute_projections=False),
            "bound": lambda enc=enc, U=U, joints=joints: network_bound(model, enc, max(U), joints),
        }
        if not tdt:
            fns["wind8"] = lambda enc=enc, lengths=lengths: greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, window=8)
            assert [h.tokens for h in greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, window=8)] == [h.tokens for h in hyps]
        assert [h.tokens for h in greedy(model, enc, lengths, engine="torch", max_symbols=MAX_SYMBOLS, loop="frames")] == [h.tokens for h in hyps]
        t = time_many(fns, repeats=repeats)
        row = [
            B,
            f"{lpf:.2f}",
            f"{t['frames'] / t['labels']:.2f}x",
            f"{t['labels_noproj'] / t['labels']:.2f}x",
        ]
        if not tdt:
            row.append(f"{t['labels'] / t['wind8']:.2f}x")
        row += [f"{t['labels'] / t['bound']:.2f}"]
        if not tdt:
            row.append(f"{t['wind8'] / t['bound']:.2f}")
        rows.append(row)
    header = ["B", "labels/frame", "label-looping vs frame-looping", "precomputed projections on vs off"]
    if not tdt:
        header.append("WIND w=8 vs label-looping")
    header.append("overhead: label-looping / bound")
    if not tdt:
        header.append("overhead: WIND w=8 / bound")
    kind = "TDT durations [0..4]" if tdt else "RNN-T"
    return f"Paper-sized {kind}, T={frames}, decoder only, 1 thread, median of {repeats}:\n\n" + markdown_table(header, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--tdt", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(run(args.frames, args.batches, args.tdt, args.repeats))


if __name__ == "__main__":
    main()
