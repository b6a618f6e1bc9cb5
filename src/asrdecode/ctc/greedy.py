"""Batched CTC greedy (best-path) decoding."""

from __future__ import annotations

from typing import Optional

import torch

from ..results import Hypothesis, Tokenizer, attach_text
from ._checks import check_blank_id, check_tokenizer, prepare_log_probs, valid_mask

__all__ = ["greedy"]


def greedy(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    tokenizer: Optional[Tokenizer] = None,
    *,
    log_softmax: bool = False,
) -> list[Hypothesis]:
    """Best-path decoding: per-frame argmax, then merge repeats and drop blanks.

    Args:
        log_probs: ``[B, T, V]`` log-probabilities (or logits with ``log_softmax=True``).
        lengths: ``[B]`` valid frames per utterance, or ``None`` for all ``T``.
        blank_id: index of the blank class.
        tokenizer: optional, fills ``Hypothesis.text``.
        log_softmax: normalise ``log_probs`` first (they are logits).

    Returns:
        One :class:`Hypothesis` per utterance: the tokens, the frame where each token's run starts
        (timestamps), and the score of the best path (sum over valid frames of the max log-prob).
        Ties in the argmax go to the lowest class id.
    """
    x, lens = prepare_log_probs(log_probs, lengths, log_softmax=log_softmax)
    batch, max_len, vocab = x.shape
    blank = check_blank_id(blank_id, vocab)
    check_tokenizer(tokenizer, vocab)
    if max_len == 0:
        return attach_text([Hypothesis([], [], 0.0) for _ in range(batch)], tokenizer)
    best, arg = x.max(dim=-1)  # [B, T]
    mask = valid_mask(lens, max_len)
    scores = torch.where(mask, best, torch.zeros_like(best)).sum(dim=1)
    prev = torch.cat([torch.full_like(arg[:, :1], -1), arg[:, :-1]], dim=1)
    emit = mask & (arg != blank) & (arg != prev)
    counts = emit.sum(dim=1).tolist()
    rows, cols = emit.nonzero(as_tuple=True)  # row-major: grouped by utterance, frames in order
    toks = arg[rows, cols].tolist()
    frames = cols.tolist()
    out: list[Hypothesis] = []
    start = 0
    score_list = scores.tolist()
    for b in range(batch):
        n = counts[b]
        out.append(Hypothesis(tokens=toks[start : start + n], timestamps=frames[start : start + n], score=score_list[b]))
        start += n
    return attach_text(out, tokenizer)
