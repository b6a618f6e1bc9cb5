"""Batched hypotheses for greedy decoding, stored in preallocated tensors.

:class:`BatchedHyps` keeps the transcripts of ``B`` utterances in ``[B, L]`` tensors and appends
with masked in-place writes (no host synchronisation). Capacity doubles when needed; the check
uses a host-side counter of append calls (each call adds at most one token per utterance), so
growing never reads a tensor value.
"""

from __future__ import annotations

import torch

from .results import Hypothesis

__all__ = ["BatchedHyps"]


class BatchedHyps:
    """Partial greedy hypotheses of a batch.

    Attributes:
        lengths: ``[B]`` int64, number of tokens of each hypothesis.
        tokens, timestamps: ``[B, L]`` int64, valid up to ``lengths``.
        durations: ``[B, L]`` int64 (TDT) or ``None``.
        scores: ``[B]`` float, accumulated log-probabilities.
    """

    def __init__(
        self,
        batch: int,
        capacity: int,
        device: torch.device,
        score_dtype: torch.dtype = torch.float32,
        with_durations: bool = False,
    ) -> None:
        capacity = max(int(capacity), 1)
        self.batch = batch
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.tokens = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.timestamps = torch.zeros_like(self.tokens)
        self.durations = torch.zeros_like(self.tokens) if with_durations else None
        self.scores = torch.zeros(batch, dtype=score_dtype, device=device)
        self._appends = 0  # upper bound of max(lengths), known on the host

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]

    def tensors(self) -> list[torch.Tensor]:
        """Every storage tensor (for CUDA-graph capture keys)."""
        out = [self.lengths, self.tokens, self.timestamps, self.scores]
        return out + ([self.durations] if self.durations is not None else [])

    def _grow(self) -> None:
        def doubled(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, torch.zeros_like(x)], dim=1)

        self.tokens = doubled(self.tokens)
        self.timestamps = doubled(self.timestamps)
        if self.durations is not None:
            self.durations = doubled(self.durations)

    def reserve_append(self) -> bool:
        """Make room for one more append; returns True if the tensors were reallocated."""
        grown = False
        while self._appends >= self.capacity:
            self._grow()
            grown = True
        self._appends += 1
        return grown

    def write(
        self, mask: torch.Tensor, tokens: torch.Tensor, timestamps: torch.Tensor, durations: torch.Tensor | None = None
    ) -> None:
        """Append ``tokens [B]`` where ``mask [B]`` is true (call :meth:`reserve_append` first).

        Sync-free: every row writes at its current length; only masked rows advance.
        """
        pos = self.lengths.clamp(max=self.capacity - 1).unsqueeze(1)
        self.tokens.scatter_(1, pos, tokens.unsqueeze(1))
        self.timestamps.scatter_(1, pos, timestamps.unsqueeze(1))
        if self.durations is not None and durations is not None:
            self.durations.scatter_(1, pos, durations.unsqueeze(1))
        self.lengths += mask.long()

    def append(
        self, mask: torch.Tensor, tokens: torch.Tensor, timestamps: torch.Tensor, durations: torch.Tensor | None = None
    ) -> None:
        """:meth:`reserve_append` then :meth:`write`."""
        self.reserve_append()
        self.write(mask, tokens, timestamps, durations)

    def to_hypotheses(self) -> list[Hypothesis]:
        """Convert to a list of :class:`Hypothesis` (one host copy of each tensor)."""
        lengths = self.lengths.tolist()
        tokens = self.tokens.cpu().tolist()
        stamps = self.timestamps.cpu().tolist()
        durs = self.durations.cpu().tolist() if self.durations is not None else None
        scores = self.scores.double().cpu().tolist()
        out = []
        for b, n in enumerate(lengths):
            out.append(
                Hypothesis(
                    tokens=tokens[b][:n],
                    timestamps=stamps[b][:n],
                    score=scores[b],
                    durations=None if durs is None else durs[b][:n],
                )
            )
        return out
