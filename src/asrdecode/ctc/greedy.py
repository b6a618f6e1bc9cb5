"""Batched CTC greedy (best-path) decoding, whole utterances or chunk by chunk (:class:`CTCGreedyDecoder`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch

from ..configs import CTCGreedyConfig
from ..errors import DecodingInputError, check_int
from ..results import Hypothesis, Tokenizer, attach_text
from ._checks import check_blank_id, check_tokenizer, prepare_log_probs, valid_mask

__all__ = ["greedy", "CTCGreedyDecoder", "CTCGreedyState"]


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
    def join(cls, states: Sequence["CTCGreedyState"], /) -> "CTCGreedyState":
        """One batch state from several (their rows in order)."""
        return cls(torch.cat([s.prev for s in states]), torch.cat([s.offset for s in states]),
                   [h for s in states for h in s.hyps])

    def split_into(self, states: Sequence["CTCGreedyState"], /) -> None:
        """Give each of ``states`` (those :meth:`join` joined) its rows of this batch state."""
        for st, part in zip(states, self.split([st.prev.shape[0] for st in states])):
            st.prev, st.offset, st.hyps = part.prev, part.offset, part.hyps

    def split(self, sizes: Sequence[int]) -> list["CTCGreedyState"]:
        """The batch cut into states of ``sizes`` rows (the inverse of :meth:`join`)."""
        out, start = [], 0
        for n in sizes:
            out.append(CTCGreedyState(self.prev[start:start + n].clone(), self.offset[start:start + n].clone(),
                                      self.hyps[start:start + n]))
            start += n
        return out


class CTCGreedyDecoder:
    """Best-path decoding (per-frame argmax, merge repeats, drop blanks): whole utterances (:meth:`decode`)
    or streams (:meth:`init_state`, :meth:`advance` per chunk, :meth:`finalize`; the chunks' final
    hypotheses equal whole-utterance decoding).

    Args:
        blank_id: index of the blank class.
        config: a :class:`~asrdecode.configs.CTCGreedyConfig` (best-path decoding has no settings; the
            registry lists it as every search's config).
        tokenizer: optional, fills ``Hypothesis.text``.
        log_softmax: normalise the emissions first (they are logits).

    Results: one :class:`Hypothesis` per utterance: the tokens, the frame where each token's run starts
    (timestamps, global frames), and the score of the best path (sum over valid frames of the max
    log-prob). Ties in the argmax go to the lowest class id. Threads: the decoder holds only its
    settings and :meth:`advance` returns a new state, so one decoder may serve several threads.
    """

    def __init__(self, blank_id: int, *, config: Optional[CTCGreedyConfig] = None,
                 tokenizer: Optional[Tokenizer] = None, log_softmax: bool = False) -> None:
        self.config = CTCGreedyConfig.build(config, caller="CTCGreedyDecoder")
        self.blank_id = blank_id
        self.tokenizer = tokenizer
        self.log_softmax = log_softmax

    def init_state(self, batch: int) -> CTCGreedyState:
        """The state of ``batch`` fresh streams."""
        check_int("batch", batch, low=0)
        return CTCGreedyState.initial(batch)

    def advance(self, state: CTCGreedyState, log_probs: torch.Tensor,
                lengths: Optional[torch.Tensor] = None) -> CTCGreedyState:
        """Decode one chunk ``log_probs [B, T, V]`` (``lengths [B]`` valid frames, default all) after
        ``state``; returns the new state (``state`` itself is not changed)."""
        if not isinstance(state, CTCGreedyState):
            raise DecodingInputError(f"state must be a CTCGreedyState, got {type(state).__name__}")
        x, lens, blank = self._check(log_probs, lengths)
        batch = x.shape[0]
        if state.prev.shape[0] != batch:
            raise DecodingInputError(f"state has batch {state.prev.shape[0]} but log_probs has {batch}")
        prev0, offset = state.prev.to(x.device), state.offset.to(x.device)
        new, last = _best_path(x, lens, blank, prev0, offset)
        merged = [Hypothesis(a.tokens + b.tokens, a.timestamps + b.timestamps, a.score + b.score)
                  for a, b in zip(state.hyps, new)]
        return CTCGreedyState(torch.where(lens > 0, last, prev0).cpu(), (offset + lens).cpu(), merged)

    def partial(self, state: CTCGreedyState) -> list[Hypothesis]:
        """Everything decoded so far (copies)."""
        return attach_text([Hypothesis(list(h.tokens), list(h.timestamps), h.score) for h in state.hyps],
                           self.tokenizer)

    def finalize(self, state: CTCGreedyState) -> list[Hypothesis]:
        """The hypotheses at the end of the streams (best path needs no end step: :meth:`partial`)."""
        return self.partial(state)

    def decode(self, log_probs: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> list[Hypothesis]:
        """Whole utterances ``log_probs [B, T, V]`` (``lengths [B]``, ``None``: all ``T``)."""
        x, lens, blank = self._check(log_probs, lengths)
        batch = x.shape[0]
        prev0 = torch.full((batch,), -1, dtype=torch.long, device=x.device)
        offset = torch.zeros(batch, dtype=torch.long, device=x.device)
        return attach_text(_best_path(x, lens, blank, prev0, offset)[0], self.tokenizer)

    __call__ = decode

    def _check(self, log_probs: object, lengths: object) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, lens = prepare_log_probs(log_probs, lengths, log_softmax=self.log_softmax)
        blank = check_blank_id(self.blank_id, x.shape[2])
        check_tokenizer(self.tokenizer, x.shape[2])
        return x, lens, blank


def greedy(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    tokenizer: Optional[Tokenizer] = None,
    *,
    log_softmax: bool = False,
    state: Optional[CTCGreedyState] = None,
) -> Union[list[Hypothesis], tuple[list[Hypothesis], CTCGreedyState]]:
    """``CTCGreedyDecoder(blank_id, ...).decode(log_probs, lengths)``: one :class:`Hypothesis` per utterance
    of ``log_probs [B, T, V]`` (``lengths [B]``, ``None``: all ``T``); arguments and results as
    :class:`CTCGreedyDecoder`.

    Deprecated (warns): ``state=`` (streaming; the call then returns ``(hypotheses so far, new state)``).
    Use ``dec.init_state`` / ``dec.advance`` / ``dec.finalize`` instead.
    """
    dec = CTCGreedyDecoder(blank_id, tokenizer=tokenizer, log_softmax=log_softmax)
    if state is None:
        return dec.decode(log_probs, lengths)
    warnings.warn("ctc.greedy(state=) is deprecated: use CTCGreedyDecoder(blank_id) with init_state(batch), "
                  "advance(state, chunk, lengths) and finalize(state) (partial(state) so far)",
                  DeprecationWarning, stacklevel=2)
    if not isinstance(state, CTCGreedyState):  # (the data is checked first, as before)
        dec._check(log_probs, lengths)
    new_state = dec.advance(state, log_probs, lengths)
    return dec.partial(new_state), new_state


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
