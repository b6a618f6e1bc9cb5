"""Batched hypotheses for greedy decoding, stored in preallocated tensors.

:class:`BatchedHyps` keeps the transcripts of ``B`` utterances in ``[B, L]`` tensors and appends
with masked in-place writes (no host synchronisation). Capacity doubles when needed; the check
uses a host-side counter of reserved appends (each append adds at most one token per utterance), so
growing never reads a tensor value: a device-resident loop reserves ``n`` appends before ``n`` rounds
(:meth:`BatchedHyps.reserve`) and writes inside them with :meth:`BatchedHyps.write`.
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

    @property
    def reserved(self) -> int:
        """Appends reserved so far: an upper bound of ``max(lengths)`` known on the host."""
        return self._appends

    def _grow_to(self, capacity: int) -> None:
        """Reallocate the ``[B, L]`` storage with ``capacity`` columns (contents kept)."""

        def grown(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x.new_zeros(x.shape[0], capacity - x.shape[1])], dim=1)

        self.tokens = grown(self.tokens)
        self.timestamps = grown(self.timestamps)
        if self.durations is not None:
            self.durations = grown(self.durations)

    def reserve(self, n: int) -> bool:
        """Make room for ``n`` more appends (capacity doubles until it fits); returns True if the tensors
        were reallocated (a captured CUDA graph over them must be captured again)."""
        need = self._appends + max(int(n), 0)
        capacity = self.capacity
        while capacity < need:
            capacity *= 2
        self._appends = need
        if capacity == self.capacity:
            return False
        self._grow_to(capacity)
        return True

    def reserve_append(self) -> bool:
        """Make room for one more append; returns True if the tensors were reallocated."""
        return self.reserve(1)

    @classmethod
    def join(cls, parts: "list[BatchedHyps]") -> "BatchedHyps":
        """One batch of the rows of ``parts``, in order (storage as wide as the widest part)."""
        first = parts[0]
        out = cls(sum(p.batch for p in parts), max(p.capacity for p in parts), first.lengths.device,
                  score_dtype=first.scores.dtype, with_durations=first.durations is not None)
        row = 0
        for p in parts:
            out.tokens[row:row + p.batch, :p.capacity] = p.tokens
            out.timestamps[row:row + p.batch, :p.capacity] = p.timestamps
            if out.durations is not None and p.durations is not None:
                out.durations[row:row + p.batch, :p.capacity] = p.durations
            out.lengths[row:row + p.batch] = p.lengths
            out.scores[row:row + p.batch] = p.scores
            row += p.batch
        out._appends = max(p.reserved for p in parts)
        return out

    def rows(self, start: int, stop: int) -> "BatchedHyps":
        """Rows ``start:stop`` as their own (copied) hypotheses."""
        out = BatchedHyps(stop - start, self.capacity, self.lengths.device, score_dtype=self.scores.dtype,
                          with_durations=self.durations is not None)
        out.tokens.copy_(self.tokens[start:stop])
        out.timestamps.copy_(self.timestamps[start:stop])
        if out.durations is not None and self.durations is not None:
            out.durations.copy_(self.durations[start:stop])
        out.lengths.copy_(self.lengths[start:stop])
        out.scores.copy_(self.scores[start:stop])
        out._appends = self._appends
        return out

    def reset(self) -> None:
        """Empty every hypothesis in place (storage and capacity kept): a cached loop's reuse."""
        self.lengths.zero_()
        self.scores.zero_()
        self._appends = 0

    def extend(self, other: "BatchedHyps") -> None:
        """Append ``other``'s hypotheses (first ``self.batch`` rows) after each of ours: tokens, timestamps,
        durations, scores added. Sync-free: every row scatters ``other.reserved`` columns at its length (the
        columns past ``other``'s lengths land past ours, unread)."""
        m = min(other.reserved, other.capacity)
        self.reserve(m)
        B = self.batch
        if m:
            pos = self.lengths.unsqueeze(1) + torch.arange(m, device=self.lengths.device)
            self.tokens.scatter_(1, pos, other.tokens[:B, :m])
            self.timestamps.scatter_(1, pos, other.timestamps[:B, :m])
            if self.durations is not None and other.durations is not None:
                self.durations.scatter_(1, pos, other.durations[:B, :m])
        self.lengths += other.lengths[:B]
        self.scores += other.scores[:B]

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
