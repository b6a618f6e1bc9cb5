"""Random Transducer models for property tests (float64, so batched and reference agree exactly)."""

from __future__ import annotations

import torch

from asrdecode.transducer import LSTMTransducer, StatelessTransducer


def random_model(
    seed: int,
    vocab: int,
    blank: int,
    durations: list[int] | None,
    kind: str = "lstm",
    pred_layers: int = 1,
    blank_bias: float = 2.0,
    enc_dim: int = 5,
) -> torch.nn.Module:
    """A small random model in float64; ``blank_bias`` raises the blank logit so decoding ends."""
    torch.manual_seed(seed)
    if kind == "lstm":
        m = LSTMTransducer(vocab, enc_dim, 6, 8, blank_id=blank, durations=durations, pred_layers=pred_layers)
    else:
        m = StatelessTransducer(vocab, enc_dim, 6, 8, blank_id=blank, durations=durations, context=pred_layers)
    m = m.double().eval()
    with torch.no_grad():
        m.joint_out.weight.mul_(2.0)
        m.joint_out.bias[blank] += blank_bias
    return m
