"""Batched CTC greedy (best-path) decoding, whole utterances or chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch

from ..errors import DecodingInputError
from ..results import Hypothesis, Tokenizer, attach_text
from ._checks import check_blank_id, check_tokenizer, prepare_log_probs, valid_mask

__all__ = ["greedy", "CTCGreedyState"]


@dataclass
class CTCGreedyState:
    """What best-path decoding carries from one chunk to the next (batch ``B``).

    Attributes:
        prev: ``[B]`` best class of the last frame decoded (-1: none yet); a label whose run goes
            on across the chunk boundary is not emitted again.
        offset: ``[B]`` frames decoded so far (timestamps are global frame indices).
        hyps: the hypotheses so far.
    """

    prev: torch.Tensor
    offset: torch.Tensor
    hyps: list[Hypothesis] = field(default_factory=list)

    @classmethod
    def initial(cls, batch: int) -> "CTCGreedyState":
        """The state of ``batch`` fresh streams."""
        return cls(torch.full((batch,), -1, dtype=torch.long), torch.zeros(batch, dtype=torch.long),
                   [Hypothesis([], [], 0.0) for _ in range(batch)])

    @classmethod
    def cat(cls, states: Sequence["CTCGreedyState"]) -> "CTCGreedyState":
        """One batch state from several (their rows in order)."""
        return cls(torch.cat([s.prev for s in states]), torch.cat([s.offset for s in states]),
                   [h for s in states for h in s.hyps])

    def split(self, sizes: Sequence[int]) -> list["CTCGreedyState"]:
        """The batch cut into states of ``sizes`` rows (the inverse of :meth:`cat`)."""
        out, start = [], 0
        for n in sizes:
            out.append(CTCGreedyState(self.prev[start:start + n].clone(), self.offset[start:start + n].clone(),
                                      self.hyps[start:start + n]))
            start += n
        return out


def greedy(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    tokenizer: Optional[Tokenizer] = None,
    *,
    log_softmax: bool = False,
    state: Optional[CTCGreedyState] = None,
) -> Union[list[Hypothesis], tuple[list[Hypothesis], CTCGreedyState]]:
    """Best-path decoding: per-frame argmax, then merge repeats and drop blanks.

    Args:
        log_probs: ``[B, T, V]`` log-probabilities (or logits with ``log_softmax=True``).
        lengths: ``[B]`` valid frames per utterance, or ``None`` for all ``T``.
        blank_id: index of the blank class.
        tokenizer: optional, fills ``Hypothesis.text``.
        log_softmax: normalise ``log_probs`` first (they are logits).
        state: streaming: the state of the stream so far (:meth:`CTCGreedyState.initial` for a new
            one); the call then returns ``(hypotheses so far, new state)``, and the chunks' final
            hypotheses equal whole-utterance decoding.

    Returns:
        One :class:`Hypothesis` per utterance: the tokens, the frame where each token's run starts
        (timestamps), and the score of the best path (sum over valid frames of the max log-prob).
        Ties in the argmax go to the lowest class id. With ``state``: ``(hypotheses, state)``.
    """
    x, lens = prepare_log_probs(log_probs, lengths, log_softmax=log_softmax)
    batch, max_len, vocab = x.shape
    blank = check_blank_id(blank_id, vocab)
    check_tokenizer(tokenizer, vocab)
    if state is not None:
        if not isinstance(state, CTCGreedyState):
            raise DecodingInputError(f"state must be a CTCGreedyState, got {type(state).__name__}")
        if state.prev.shape[0] != batch:
            raise DecodingInputError(f"state has batch {state.prev.shape[0]} but log_probs has {batch}")
    prev0 = state.prev.to(x.device) if state is not None else torch.full((batch,), -1, dtype=torch.long,
                                                                          device=x.device)
    offset = state.offset.to(x.device) if state is not None else torch.zeros(batch, dtype=torch.long, device=x.device)
    new, last = _best_path(x, lens, blank, prev0, offset)
    if state is None:
        return attach_text(new, tokenizer)
    merged = [Hypothesis(a.tokens + b.tokens, a.timestamps + b.timestamps, a.score + b.score)
              for a, b in zip(state.hyps, new)]
    carried = CTCGreedyState(torch.where(lens > 0, last, prev0).cpu(), (offset + lens).cpu(), merged)
    return attach_text([Hypothesis(list(h.tokens), list(h.timestamps), h.score) for h in merged], tokenizer), carried


def _best_path(x: torch.Tensor, lens: torch.Tensor, blank: int, prev0: torch.Tensor,
               offset: torch.Tensor) -> tuple[list[Hypothesis], torch.Tensor]:
    """Hypotheses of ``x [B, T, V]`` whose frame before the first had best class ``prev0 [B]``; timestamps
    start at ``offset [B]``. Also returns the best class of each row's last valid frame ``[B]``."""
    batch, max_len, _ = x.shape
    if max_len == 0:
        return [Hypothesis([], [], 0.0) for _ in range(batch)], prev0
    best, arg = x.max(dim=-1)  # [B, T]
    mask = valid_mask(lens, max_len)
    scores = torch.where(mask, best, torch.zeros_like(best)).sum(dim=1)
    prev = torch.cat([prev0[:, None], arg[:, :-1]], dim=1)
    emit = mask & (arg != blank) & (arg != prev)
    counts = emit.sum(dim=1).tolist()
    rows, cols = emit.nonzero(as_tuple=True)  # row-major: grouped by utterance, frames in order
    toks = arg[rows, cols].tolist()
    frames = (cols + offset[rows]).tolist()
    out: list[Hypothesis] = []
    start = 0
    score_list = scores.tolist()
    for b in range(batch):
        n = counts[b]
        out.append(Hypothesis(tokens=toks[start : start + n], timestamps=frames[start : start + n], score=score_list[b]))
        start += n
    last = arg.gather(1, (lens - 1).clamp(min=0)[:, None]).squeeze(1)
    return out, last
