"""What the streams of a session share outside their own states: the prediction-network pool and
the boosting-state shift.

Every decoder family's state batches itself (``CTCGreedyState.cat`` / ``split``,
``CTCBeamState.cat`` / ``split_into``, ``BeamState.cat`` / ``split_into``,
``WFSTStreamState.cat`` / ``split_into``): the batched call gets a fresh hypothesis tree, and each
stream's own tree is extended with its row of the new steps afterwards. Two things stay here:

- Prediction-network states are model pytrees, handled through the model protocol alone
  (``select_state`` / ``replace_state``) by :class:`StatePool`, one pool row block per stream, so a
  step gathers only the streams it decodes.
- Fusion states of per-stream boosting trees: each stream stores its states in its own tree's
  numbering; the batched call uses the stack of the batch's trees, whose tree ``i`` starts at
  state ``roots[i]``, so :func:`shift_column` adds that start before the call and subtracts it after.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["StatePool", "shift_column"]


# -- prediction-network states ------------------------------------------------------------------------


class StatePool:
    """The prediction-network states of many streams in one model pytree, ``rows`` rows per stream.

    A stream owns a slot (rows ``slot * rows .. slot * rows + rows - 1``). The pool grows by
    doubling (rows copied with ``select_state``); slots of closed streams are reused.
    """

    def __init__(self, model: Any, rows: int) -> None:
        self.model = model
        self.rows = int(rows)
        self.state: Any = None
        self.capacity = 0
        self.free: list[int] = []

    def _row_index(self, slots: Sequence[int]) -> torch.Tensor:
        base = torch.as_tensor(list(slots), dtype=torch.long) * self.rows
        return (base[:, None] + torch.arange(self.rows)[None, :]).reshape(-1)

    def add(self, state: Any) -> int:
        """Store ``state`` (batch ``rows``) in a free slot; returns the slot."""
        if self.state is None:
            self.state, self.capacity = state, 1
            return 0
        if not self.free:
            n = self.capacity * self.rows
            keep = torch.cat([torch.arange(n), torch.zeros(n, dtype=torch.long)])
            self.state = self.model.select_state(self.state, keep)
            self.free = list(range(2 * self.capacity - 1, self.capacity - 1, -1))
            self.capacity *= 2
        slot = self.free.pop()
        self.scatter([slot], state)
        return slot

    def release(self, slot: int) -> None:
        """Give a closed stream's slot back (its rows are overwritten by the next :meth:`add`)."""
        self.free.append(slot)

    def gather(self, slots: Sequence[int]) -> Any:
        """The states of ``slots``, batch ``len(slots) * rows`` (stream-major)."""
        return self.model.select_state(self.state, self._row_index(slots))

    def scatter(self, slots: Sequence[int], state: Any) -> None:
        """Write ``state`` (batch ``len(slots) * rows``, stream-major) into ``slots``."""
        rows = self._row_index(slots)
        total = self.capacity * self.rows
        src = torch.zeros(total, dtype=torch.long)
        src[rows] = torch.arange(rows.numel())
        mask = torch.zeros(total, dtype=torch.bool)
        mask[rows] = True
        self.state = self.model.replace_state(self.state, self.model.select_state(state, src), mask)


# -- plain tensors ---------------------------------------------------------------------------------


def shift_column(states: torch.Tensor, column: int | None, shifts: Sequence[int]) -> torch.Tensor:
    """Fusion states ``[n * r, ...]`` (``r`` rows per stream) with ``shifts[i]`` added to column
    ``column`` of stream ``i``'s rows (the last dimension indexes the fusion models)."""
    if column is None or not any(shifts):
        return states
    n = len(shifts)
    per = states.shape[0] // n
    add = torch.as_tensor(list(shifts), dtype=states.dtype).repeat_interleave(per)
    out = states.clone()
    out[..., column] += add.view(-1, *([1] * (states.dim() - 2)))
    return out
