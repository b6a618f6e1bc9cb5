"""Gathering the carried states of many streams into one batch state, and scattering them back.

Each decoder family already streams with a batch state of fixed size (``GreedyState``,
``BeamState``, ``CTCBeamState``, ``WFSTStreamState``). A :class:`~asrdecode.streaming.StreamDecoder`
keeps one state per stream; for a step it gathers the states of the streams that have new frames
into one batch state, runs the family's own streaming call once, and scatters the result back.
Nothing here decodes: these functions only move rows.

- Prediction-network states are model pytrees, handled through the model protocol alone
  (``select_state`` / ``replace_state``) by :class:`StatePool`, one pool row block per stream.
- Hypothesis trees (:class:`~asrdecode.beam_hyps.BeamTree`): the batched call gets a fresh tree,
  and each stream's own tree is extended with its row of the new steps (parents are per-row slot
  indices, so the result is the tree a batch-1 search would have built).
- WFST states batch themselves (:meth:`asrdecode.ctc.wfst.WFSTStreamState.cat` / ``split_into``).
- Fusion states of per-stream boosting trees: each stream stores its states in its own tree's
  numbering; the batched call uses the stack of the batch's trees, whose tree ``i`` starts at
  state ``roots[i]``, so gathering adds that start and scattering subtracts it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ..beam_hyps import BeamTree
from ..ctc.beam import CTCBeamState
from ..ctc.collapse import CollapseState
from ..hyps import BatchedHyps
from ..transducer import BeamState, GreedyState

__all__ = [
    "StatePool",
    "GreedyRow",
    "gather_greedy",
    "scatter_greedy",
    "gather_rows",
    "take_row",
    "shift_column",
    "gather_beam",
    "scatter_beam",
    "gather_ctc_beam",
    "scatter_ctc_beam",
]


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


def gather_rows(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate per-stream tensors along their first (batch-major) dimension."""
    return torch.cat(list(parts), dim=0)


def take_row(x: torch.Tensor, index: int, count: int) -> torch.Tensor:
    """Stream ``index``'s rows of a batch-major tensor holding ``count`` streams."""
    rows = x.shape[0] // count
    return x[index * rows : (index + 1) * rows].clone()


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


# -- transducer greedy ------------------------------------------------------------------------------


@dataclasses.dataclass
class GreedyRow:
    """One stream's greedy state: its pool slot, the last prediction output and the transcript so far."""

    slot: int
    dec_out: torch.Tensor  # [1, P]
    skip: int = 0
    offset: int = 0
    tokens: list[int] = dataclasses.field(default_factory=list)
    timestamps: list[int] = dataclasses.field(default_factory=list)
    durations: list[int] | None = None
    score: float = 0.0


def gather_greedy(pool: StatePool, rows: Sequence[GreedyRow], score_dtype: torch.dtype) -> GreedyState:
    """A batch :class:`GreedyState` of ``rows``: their prediction states and outputs, and empty
    hypotheses holding their scores (the batched call appends this chunk's labels only)."""
    n = len(rows)
    hyps = BatchedHyps(n, 8, torch.device("cpu"), score_dtype=score_dtype,
                       with_durations=rows[0].durations is not None)
    hyps.scores = torch.tensor([r.score for r in rows], dtype=score_dtype)
    return GreedyState(
        pred_state=pool.gather([r.slot for r in rows]),
        dec_out=gather_rows([r.dec_out for r in rows]),
        skip=torch.tensor([r.skip for r in rows], dtype=torch.long),
        offset=torch.tensor([r.offset for r in rows], dtype=torch.long),
        hyps=hyps,
    )


def scatter_greedy(pool: StatePool, rows: Sequence[GreedyRow], state: GreedyState) -> None:
    """Write a batch state back: prediction states, outputs, skips, offsets; append each row's new
    labels to its transcript and take its total score."""
    pool.scatter([r.slot for r in rows], state.pred_state)
    new = state.hyps.to_hypotheses()
    skip, offset = state.skip.tolist(), state.offset.tolist()
    for b, (row, hyp) in enumerate(zip(rows, new)):
        row.dec_out = take_row(state.dec_out, b, len(rows))
        row.skip, row.offset, row.score = skip[b], offset[b], hyp.score
        row.tokens.extend(hyp.tokens)
        row.timestamps.extend(hyp.timestamps)
        if row.durations is not None:
            row.durations.extend(hyp.durations or [])


# -- transducer beam --------------------------------------------------------------------------------


def _gather_beam_hyps(pool: StatePool, slots: Sequence[int], states: Sequence[BeamState]) -> dict[str, Any]:
    hyps: dict[str, Any] = {}
    for name, value in states[0].hyps.items():
        if name == "pred_state":
            hyps[name] = pool.gather(slots)
        elif isinstance(value, torch.Tensor):
            hyps[name] = gather_rows([s.hyps[name] for s in states])
        else:
            raise TypeError(f"BeamState.hyps[{name!r}] is a {type(value).__name__}; only tensors and the "
                            "prediction state can be batched")
    return hyps


def gather_beam(pool: StatePool, slots: Sequence[int], states: Sequence[BeamState],
                boost_column: int | None = None, boost_shifts: Sequence[int] = ()) -> BeamState:
    """One batch :class:`BeamState` from batch-1 states (their ``pred_state`` lives in ``pool``).

    Tensors are concatenated, per-utterance lists (``tail``) joined, the settings taken from the
    first state; the batch gets a fresh tree. ``boost_shifts[i]``: where stream ``i``'s boosting tree
    starts in the stacked tree of this batch (its fusion states' column ``boost_column``).
    """
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(BeamState):
        first = getattr(states[0], f.name)
        if f.name == "hyps":
            hyps = _gather_beam_hyps(pool, slots, states)
            if "lm_states" in hyps:
                hyps["lm_states"] = shift_column(hyps["lm_states"], boost_column, boost_shifts)
            fields[f.name] = hyps
        elif isinstance(first, BeamTree):
            fields[f.name] = BeamTree()
        elif isinstance(first, torch.Tensor):
            fields[f.name] = gather_rows([getattr(s, f.name) for s in states])
        elif isinstance(first, list):
            fields[f.name] = [x for s in states for x in getattr(s, f.name)]
        else:
            fields[f.name] = first
    return BeamState(**fields)


def scatter_beam(pool: StatePool, slots: Sequence[int], states: Sequence[BeamState], batch: BeamState,
                 boost_column: int | None = None, boost_shifts: Sequence[int] = ()) -> None:
    """Write a batch state back into the batch-1 states (each tree extended by its row of the new steps)."""
    n = len(states)
    pool.scatter(slots, batch.hyps["pred_state"])
    lm = batch.hyps.get("lm_states")
    if lm is not None:
        lm = shift_column(lm, boost_column, [-s for s in boost_shifts])
    for b, st in enumerate(states):
        for name, value in batch.hyps.items():
            if name != "pred_state":
                st.hyps[name] = take_row(lm if name == "lm_states" else value, b, n)
        for f in dataclasses.fields(BeamState):
            value = getattr(batch, f.name)
            if isinstance(value, BeamTree):
                getattr(st, f.name).extend(value.take_rows(torch.tensor([b])))
            elif isinstance(value, torch.Tensor):
                setattr(st, f.name, take_row(value, b, n))
            elif isinstance(value, list):
                setattr(st, f.name, [value[b]])


# -- CTC prefix beam search -------------------------------------------------------------------------


def _gather_collapse(parts: Sequence[CollapseState | None]) -> CollapseState | None:
    if parts[0] is None:
        return None
    return CollapseState(**{f.name: gather_rows([getattr(p, f.name) for p in parts])
                            for f in dataclasses.fields(CollapseState)})


def _take_collapse(c: CollapseState | None, b: int, n: int) -> CollapseState | None:
    if c is None:
        return None
    return CollapseState(**{f.name: take_row(getattr(c, f.name), b, n) for f in dataclasses.fields(CollapseState)})


def gather_ctc_beam(template: CTCBeamState, states: Sequence[CTCBeamState],
                    boost_column: int | None = None, boost_shifts: Sequence[int] = ()) -> CTCBeamState:
    """Fill ``template`` (a fresh state of the batch's size and settings, from ``beam_search`` on an
    empty chunk) with the rows of the batch-1 ``states``; its tree stays fresh."""
    for f in dataclasses.fields(CTCBeamState):
        value = getattr(states[0], f.name)
        if f.name == "collapse":
            template.collapse = _gather_collapse([s.collapse for s in states])
        elif isinstance(value, torch.Tensor):
            setattr(template, f.name, gather_rows([getattr(s, f.name) for s in states]))
    template.fstates = shift_column(template.fstates, boost_column, boost_shifts)
    return template


def scatter_ctc_beam(states: Sequence[CTCBeamState], batch: CTCBeamState,
                     boost_column: int | None = None, boost_shifts: Sequence[int] = ()) -> None:
    """Write a batch state back into the batch-1 states (each tree extended by its row of the new steps)."""
    n = len(states)
    fstates = shift_column(batch.fstates, boost_column, [-s for s in boost_shifts])
    for b, st in enumerate(states):
        for f in dataclasses.fields(CTCBeamState):
            value = getattr(batch, f.name)
            if f.name == "collapse":
                st.collapse = _take_collapse(batch.collapse, b, n)
            elif isinstance(value, torch.Tensor):
                setattr(st, f.name, take_row(fstates if f.name == "fstates" else value, b, n))
        st.tree.extend(batch.tree.take_rows(torch.tensor([b])))
