"""Plain-data results: :class:`Hypothesis` and the tokenizer protocol used to make text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

__all__ = ["Hypothesis", "Tokenizer", "attach_text"]


@runtime_checkable
class Tokenizer(Protocol):
    """Anything that turns model token ids (blank excluded) into text."""

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Hypothesis:
    """One decoded hypothesis of one utterance.

    Attributes:
        tokens: emitted (non-blank) token ids, in order.
        timestamps: encoder frame index at which each token was emitted (same length as tokens).
        score: total log-probability of the decoding path (natural log), see each decoder's docs.
        durations: TDT only: the duration (in frames, a value of the model's ``durations``)
            predicted with each token; ``None`` for RNN-T and CTC.
        text: the detokenised text when a tokenizer was given, else ``None``.
        words: optional word-level segmentation ``[(word, start_frame, end_frame), ...]``.
    """

    tokens: list[int]
    timestamps: list[int]
    score: float
    durations: list[int] | None = None
    text: str | None = None
    words: list[tuple[str, int, int]] | None = field(default=None)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.timestamps):
            raise ValueError("Hypothesis: tokens and timestamps must have the same length")
        if self.durations is not None and len(self.durations) != len(self.tokens):
            raise ValueError("Hypothesis: durations and tokens must have the same length")


def attach_text(hyps: list[Hypothesis], tokenizer: Tokenizer | None) -> list[Hypothesis]:
    """Fill ``text`` of each hypothesis with ``tokenizer.decode(tokens)`` (in place); returns ``hyps``."""
    if tokenizer is not None:
        for h in hyps:
            h.text = tokenizer.decode(h.tokens)
    return hyps
