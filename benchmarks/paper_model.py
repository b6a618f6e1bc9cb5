"""The paper-sized Transducer used by the speed benchmarks (label-looping paper, Table 1 sizes).

Encoder width 512, prediction LSTM 640, joint 640, vocabulary 1024 + blank (blank last, as in
NeMo), 8x-subsampled frames. Random weights emit almost uniformly, so the blank logit's bias
is calibrated (bisection, with our exact greedy decoder) until greedy decoding emits about
``labels_per_frame`` labels per frame, like a trained model (~0.3 for 1024 BPE at 80 ms).
"""

from __future__ import annotations

import torch

from asrdecode.transducer import LSTMTransducer, greedy

ENC_DIM, PRED_DIM, JOINT_DIM, VOCAB = 512, 640, 640, 1025
TDT_DURATIONS = [0, 1, 2, 3, 4]


def make_encoder_output(batch: int, frames: int = 150, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random encoder output ``[B, T, 512]`` with all lengths ``T`` (``[B]``)."""
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(batch, frames, ENC_DIM, generator=g)
    return enc, torch.full((batch,), frames, dtype=torch.long)


def labels_per_frame(model: LSTMTransducer, enc: torch.Tensor, lengths: torch.Tensor, max_symbols: int = 10) -> float:
    hyps = greedy(model, enc, lengths, max_symbols=max_symbols)
    return sum(len(h.tokens) for h in hyps) / float(lengths.sum())


def make_paper_model(seed: int = 0, tdt: bool = False, target: float = 0.3) -> LSTMTransducer:
    """Paper-sized RNN-T (or TDT with durations [0..4]) emitting ~``target`` labels per frame."""
    torch.manual_seed(seed)
    model = LSTMTransducer(
        VOCAB, ENC_DIM, PRED_DIM, JOINT_DIM, blank_id=VOCAB - 1, durations=TDT_DURATIONS if tdt else None
    ).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    enc, lengths = make_encoder_output(4, 50, seed=seed + 1)
    base = model.joint_out.bias[VOCAB - 1].item()
    lo, hi = -1.0, 6.0  # bias offsets: more bias -> fewer labels (the rate falls steeply in this range)
    for _ in range(12):
        mid = (lo + hi) / 2
        model.joint_out.bias[VOCAB - 1] = base + mid
        if labels_per_frame(model, enc, lengths) > target:
            lo = mid
        else:
            hi = mid
    model.joint_out.bias[VOCAB - 1] = base + (lo + hi) / 2
    return model
