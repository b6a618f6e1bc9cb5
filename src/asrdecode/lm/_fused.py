"""The back-off walk of :class:`~asrdecode.lm._automaton.BackoffAutomaton` resolved per state at load.

``BackoffAutomaton._advance`` walks each state's back-off chain in ``max_chain`` masked tensor steps
and scatters the arcs of every light (non-dense) state on the way, one level after the other: about
25 kernels per level. The chain depends only on the state, so this module resolves it once for every
state ``s`` (all levels at once, vectorised over the states):

* ``fused_int [S, 1 + L]`` (int64): the dense row of the first dense state on the chain, then the first
  arc of the chain's ``j``-th light state (0 where the chain has reached the dense state already);
* ``fused_float [S, 1 + L]`` (float32): the back-off weight accumulated up to that dense state, then the
  one accumulated up to level ``j`` (the same float32 additions in the same order as the walk);
* ``fused_keep [S, L * D]`` (uint8): entry ``(j, d)`` (arc ``d`` of level ``j``, ``D`` the most arcs of a
  light state) exists and no nearer level has an arc with the same label, so one scatter writes every
  level with no two writes to one cell (the walk's level order made the nearer write win).

Scoring the vocabulary for ``N`` states is then two row gathers of these tables, the dense rows, one
gather of the ``N x L x D`` candidate arcs and one scatter: about 18 kernels whatever the order, exactly
the walk's values (``L = max_chain``, ``D = light_degree``). Only built while ``L * D <= MAX_ENTRIES``
(a word-level LM with few dense rows has thousands of arcs per light state: it keeps the walk).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from .._validation import version_of

__all__ = ["MAX_ENTRIES", "FusedTables", "build_fused", "advance_fused", "score_tokens_fused"]

MAX_ENTRIES = 64  # most candidate arcs (levels x light degree) per state for the fused tables


class BackoffAutomaton(Protocol):
    """What the fused tables read of :class:`asrdecode.lm._automaton.BackoffAutomaton` (which builds
    them: a protocol here, so the two modules do not import each other)."""

    vocab_size: int
    blank_id: int | None
    max_chain: int
    light_degree: int
    _n_arcs: int
    arc_offsets: torch.Tensor
    arc_label: torch.Tensor
    arc_dest: torch.Tensor
    arc_weight: torch.Tensor
    backoff_state: torch.Tensor
    backoff_weight: torch.Tensor
    degree: torch.Tensor
    dense_index: torch.Tensor
    dense_scores: torch.Tensor
    dense_next: torch.Tensor

    @property
    def num_states(self) -> int: ...


class FusedTables(NamedTuple):
    """The per-state tables (see the module docstring); ``levels`` = L, ``degree`` = D."""

    int_table: torch.Tensor  # [S, 1 + L] int64
    float_table: torch.Tensor  # [S, 1 + L] float32
    keep: torch.Tensor  # [S, L * D] uint8
    arange_d: torch.Tensor  # [D] int64, 0..D-1
    levels: int
    degree: int


def build_fused(a: "BackoffAutomaton") -> FusedTables | None:
    """The fused tables of ``a`` (its dense rows built), or ``None`` when ``L * D > MAX_ENTRIES``."""
    L, D = a.max_chain, a.light_degree
    if D == 0:
        L = 0  # no light state has an arc: the chain only moves the dense row and the accumulated weight
    if L * D > MAX_ENTRIES:
        return None
    S = a.num_states
    dev = a.arc_offsets.device
    cur = torch.arange(S, device=dev)
    acc = torch.zeros(S, dtype=torch.float32, device=dev)
    done = a.dense_index >= 0
    ints = torch.zeros((S, 1 + L), dtype=torch.int64, device=dev)
    floats = torch.zeros((S, 1 + L), dtype=torch.float32, device=dev)
    degs = torch.zeros((S, L), dtype=torch.int64, device=dev)
    steps = a.max_chain  # the walk's step count, also when no light state has arcs
    for j in range(steps):
        active = ~done
        if j < L:
            ints[:, 1 + j] = torch.where(active, a.arc_offsets[cur], 0)
            floats[:, 1 + j] = torch.where(active, acc, 0.0)
            degs[:, j] = torch.where(active, a.degree[cur], 0)
        acc = acc + torch.where(active, a.backoff_weight[cur], 0.0)  # as BackoffAutomaton._advance adds
        cur = torch.where(active, a.backoff_state[cur], cur)
        done = done | (active & (a.dense_index[cur] >= 0))
    ints[:, 0] = a.dense_index[cur].clamp_min(0)  # every chain ends at a dense state (a terminal at worst)
    floats[:, 0] = acc
    keep = _keep_mask(a, ints[:, 1:], degs, D)
    ar = torch.arange(D, device=dev)
    return FusedTables(ints.contiguous(), floats.contiguous(), keep, ar, L, D)


def _keep_mask(a: "BackoffAutomaton", starts: torch.Tensor, degs: torch.Tensor, D: int) -> torch.Tensor:
    """``[S, L * D]`` uint8: entry (level j, arc d) exists and no level ``i < j`` has an arc with its label."""
    S, L = starts.shape
    E = L * D
    keep = torch.zeros((S, E), dtype=torch.uint8, device=starts.device)
    if E == 0:
        return keep
    ar = torch.arange(D, device=starts.device)
    level = torch.arange(L, device=starts.device).repeat_interleave(D)  # [E]
    nearer = level[None, :] < level[:, None]  # [E (entry), E (other)]: the other entry is on a nearer level
    last = max(a._n_arcs - 1, 0)
    chunk = max(1, (1 << 22) // (E * E))
    for c0 in range(0, S, chunk):
        st, dg = starts[c0 : c0 + chunk], degs[c0 : c0 + chunk]
        valid = (ar[None, None, :] < dg[:, :, None]).reshape(-1, E)
        lab = a.arc_label[(st[:, :, None] + ar).reshape(-1, E).clamp_max(last)]
        same = (lab[:, :, None] == lab[:, None, :]) & valid[:, None, :] & nearer
        keep[c0 : c0 + chunk] = (valid & ~same.any(dim=2)).to(torch.uint8)
    return keep


def _candidates(a: "BackoffAutomaton", t: FusedTables, ints: torch.Tensor) -> torch.Tensor:
    """Arc indices ``[N, L * D]`` of every level's arcs (clamped into range; ``keep`` says which count)."""
    N = ints.shape[0]
    idx = (ints[:, 1:, None] + t.arange_d).view(N, t.levels * t.degree)
    return idx.clamp_max_(max(a._n_arcs - 1, 0))


class EntryTables(NamedTuple):
    """Per-state candidate entries (derived from :class:`FusedTables` and the arcs, for ``advance``): ``arc
    [S, L * D]`` (int32) each entry's arc, ``n_arcs`` (a sentinel arc) where the entry is not kept; ``acc
    [S, L * D]`` (float32) its level's accumulated back-off weight; ``label`` / ``weight`` / ``dest`` the
    arcs' columns plus the sentinel (the blank, 0, 0: its writes land on the blank column, set after)."""

    arc: torch.Tensor
    acc: torch.Tensor
    label: torch.Tensor
    weight: torch.Tensor
    dest: torch.Tensor


#: most entries (states x levels x light degree) the :class:`EntryTables` of one automaton may have (about
#: 20 bytes each including the arcs' copy); larger automata read the fused tables (a few more ops per call)
MAX_ENTRY_TABLE = 1 << 23


def entry_tables(a: "BackoffAutomaton", t: FusedTables) -> EntryTables | None:
    """The :class:`EntryTables` of ``a`` (built at the first call, kept while the fused tables and the arcs
    are the same tensors, unchanged), or None (no blank, no light level, or too many entries)."""
    E = t.levels * t.degree
    S = t.int_table.shape[0]
    if a.blank_id is None or E == 0 or S * E > MAX_ENTRY_TABLE:
        return None
    cache = a.__dict__.get("_entry_cache")  # a tuple, not a tensor attribute: not part of a graph key
    if cache is not None and torch.compiler.is_compiling():  # the key reads addresses, which a trace cannot:
        return cache[1]  # the tables an eager call (or the first trace) built
    sources = (t.int_table, t.float_table, t.keep, a.arc_label, a.arc_weight, a.arc_dest)
    key = tuple((x.data_ptr(), version_of(x), x.device, x.shape) for x in sources)
    if cache is not None and cache[0] == key:
        return cache[1]
    with torch.no_grad():
        idx = _candidates(a, t, t.int_table)  # [S, E]
        arc = torch.where(t.keep.view(torch.bool), idx, a._n_arcs).to(torch.int32)
        acc = t.float_table[:, 1:].repeat_interleave(t.degree, dim=1).contiguous()  # level j's weight, D times
        tables = EntryTables(arc, acc, torch.cat([a.arc_label, a.arc_label.new_full((1,), a.blank_id)]),
                             torch.cat([a.arc_weight, a.arc_weight.new_zeros(1)]),
                             torch.cat([a.arc_dest, a.arc_dest.new_zeros(1)]))
    a.__dict__["_entry_cache"] = (key, tables)
    return tables


def advance_fused(a: "BackoffAutomaton", t: FusedTables, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ``[N, V]`` (float32) and next states ``[N, V]`` (int64) of every label from ``states [N]``."""
    N, V = states.shape[0], a.vocab_size
    ints, floats = t.int_table[states], t.float_table[states]  # [N, 1 + L]
    blank = a.blank_id
    row = ints[:, 0]
    if blank is not None:  # absent entries write the blank column (overwritten below): plain [N, V] rows
        scores = a.dense_scores.index_select(0, row)
        nxt = a.dense_next.index_select(0, row)
        flat_s = flat_n = scores  # (unused with a blank)
    else:  # without a blank, the writes of absent entries go to one extra cell past the rows
        flat_s = torch.empty(N * V + 1, dtype=torch.float32, device=states.device)
        flat_n = torch.empty(N * V + 1, dtype=torch.int64, device=states.device)
        scores, nxt = flat_s[: N * V].view(N, V), flat_n[: N * V].view(N, V)
        torch.index_select(a.dense_scores, 0, row, out=scores)
        torch.index_select(a.dense_next, 0, row, out=nxt)
    scores += floats[:, :1]
    ent = entry_tables(a, t) if t.levels else None
    if ent is not None:  # (a blank): every entry's arc, value and destination from the per-state tables
        arc = ent.arc[states]  # [N, E]
        pos = ent.label[arc]
        scores.scatter_(1, pos, ent.weight[arc] + ent.acc[states])
        nxt.scatter_(1, pos, ent.dest[arc])
    elif t.levels:
        E = t.levels * t.degree
        idx = _candidates(a, t, ints)
        keep = t.keep[states] != 0  # (a comparison, not a bool view: Inductor cannot lower dtype views to bool)
        val = (a.arc_weight[idx].view(N, t.levels, t.degree) + floats[:, 1:, None]).view(N, E)
        if blank is not None:  # absent entries write the blank column, which is overwritten below
            pos = torch.where(keep, a.arc_label[idx], blank)
            scores.scatter_(1, pos, val)
            nxt.scatter_(1, pos, a.arc_dest[idx])
        else:
            base = torch.arange(0, N * V, V, device=states.device)[:, None]
            pos = torch.where(keep, a.arc_label[idx] + base, N * V).view(N * E)
            flat_s.scatter_(0, pos, val.view(N * E))
            flat_n.scatter_(0, pos, a.arc_dest[idx].view(N * E))
    if blank is not None:
        scores.select(1, blank).fill_(0.0)
        nxt.select(1, blank).copy_(states)
    return scores, nxt


def score_tokens_fused(a: "BackoffAutomaton", t: FusedTables, states: torch.Tensor,
                       tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and next states ``[N, K]`` of ``tokens [N, K]`` from ``states [N]``: each token's dense
    value, replaced by the (unique) kept light entry with its label where there is one."""
    ints, floats = t.int_table[states], t.float_table[states]  # [N, 1 + L]
    row = ints[:, :1]
    out_s = a.dense_scores[row, tokens] + floats[:, :1]
    out_n = a.dense_next[row, tokens]
    if t.levels:
        idx = _candidates(a, t, ints)  # [N, E]
        lab = torch.where(t.keep[states] != 0, a.arc_label[idx], -1)
        match = lab[:, None, :] == tokens[:, :, None]  # [N, K, E]
        if torch.compiler.is_compiling():  # Inductor's C++ max + argmax of a bool fails to build (mixed vector
            hit, e = match.to(torch.uint8).max(dim=2)  # masks): the same over uint8 (at most one hit a row)
            hit_b = hit != 0
        else:
            hit_b, e = match.max(dim=2)  # [N, K]
        arc = idx.gather(1, e)
        acc = floats[:, 1:].gather(1, e // t.degree)
        out_s = torch.where(hit_b, a.arc_weight[arc] + acc, out_s)
        out_n = torch.where(hit_b, a.arc_dest[arc], out_n)
    if a.blank_id is not None:
        is_blank = tokens == a.blank_id
        out_s = out_s.masked_fill(is_blank, 0.0)
        out_n = torch.where(is_blank, states[:, None].expand_as(tokens), out_n)
    return out_s, out_n


class PreparedAdvance:
    """:func:`advance_fused` for a fixed states tensor (``states [N]``, a view the caller updates in place),
    with every buffer and view made once: a frame loop's LM step in about 15 kernels (a CUDA graph
    replays them). ``run()`` returns the scores ``[N, V]`` and next states ``[N, V]`` (buffers, rewritten
    by the next call). The blank column has score 0 (as :func:`advance_fused`'s) and a valid state: callers
    mask their blank extensions (the CTC prefix search does); the scores of the other labels are
    :func:`advance_fused`'s exactly. Integer masks only (no bool dtype views: Inductor cannot lower them)."""

    def __init__(self, a: "BackoffAutomaton", t: FusedTables, states: torch.Tensor) -> None:
        N, V, dev = states.shape[0], a.vocab_size, states.device
        self.a, self.t, self.states = a, t, states
        L, D = t.levels, t.degree
        self.ints = torch.empty((N, 1 + L), dtype=torch.int64, device=dev)
        self.floats = torch.empty((N, 1 + L), dtype=torch.float32, device=dev)
        self.row, self.acc0 = self.ints[:, 0], self.floats[:, :1]
        self.scores = torch.empty((N, V), dtype=torch.float32, device=dev)
        self.nxt = torch.empty((N, V), dtype=torch.int64, device=dev)
        E = L * D
        self.E = E
        # arcs of every level: [N, L, D] indices, written as starts + 0..D-1
        self.idx = torch.empty((N, L, D), dtype=torch.int64, device=dev)
        self.idx_flat = self.idx.view(N * E)
        self.starts = self.ints[:, 1:, None]
        self.acc = self.floats[:, 1:, None]
        self.keep = torch.empty((N, E), dtype=torch.uint8, device=dev)
        self.val = torch.empty((N, L, D), dtype=torch.float32, device=dev)
        self.val_flat, self.val_2 = self.val.view(N * E), self.val.view(N, E)
        self.lab = torch.empty((N, E), dtype=torch.int64, device=dev)
        self.dst = torch.empty((N, E), dtype=torch.int64, device=dev)
        self.lab_flat, self.dst_flat = self.lab.view(N * E), self.dst.view(N * E)
        self.last_arc = max(a._n_arcs - 1, 0)
        self.spill = torch.tensor(a.blank_id if a.blank_id is not None else 0, device=dev)
        if a.blank_id is None and E:  # absent entries need a column of their own: one past the row
            self.scores_pad = torch.empty((N, V + 1), dtype=torch.float32, device=dev)
            self.nxt_pad = torch.empty((N, V + 1), dtype=torch.int64, device=dev)
            self.scores, self.nxt = self.scores_pad[:, :V], self.nxt_pad[:, :V]
            self.spill = torch.tensor(V, device=dev)
        self.blank_scores = None if a.blank_id is None else self.scores.select(1, a.blank_id)  # (a view made once)

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        a, t, states = self.a, self.t, self.states
        torch.index_select(t.int_table, 0, states, out=self.ints)
        torch.index_select(t.float_table, 0, states, out=self.floats)
        torch.index_select(a.dense_scores, 0, self.row, out=self.scores)
        self.scores.add_(self.acc0)
        torch.index_select(a.dense_next, 0, self.row, out=self.nxt)
        if self.E:
            self._light_entries()
        if self.blank_scores is not None:  # a dense row's blank cell or the spill of an absent entry (maybe
            self.blank_scores.fill_(0.0)  # -inf, which a negative fusion weight makes +inf, and a masked blank
            # extension then NaN); its state is valid either way
        return self.scores, self.nxt

    def _light_entries(self) -> None:
        """The kept light entries of every level over the dense row (absent ones spill to the blank's
        column, or to the one past the row without a blank)."""
        a, t, states = self.a, self.t, self.states
        torch.add(self.starts, t.arange_d, out=self.idx).clamp_max_(self.last_arc)
        torch.index_select(t.keep, 0, states, out=self.keep)
        torch.index_select(a.arc_weight, 0, self.idx_flat, out=self.val_flat)
        self.val.add_(self.acc)
        torch.index_select(a.arc_label, 0, self.idx_flat, out=self.lab_flat)
        torch.index_select(a.arc_dest, 0, self.idx_flat, out=self.dst_flat)
        pos = torch.where(self.keep != 0, self.lab, self.spill)  # absent entries: the spill column
        if a.blank_id is None:
            self.scores_pad.scatter_(1, pos, self.val_2)
            self.nxt_pad.scatter_(1, pos, self.dst)
        else:
            self.scores.scatter_(1, pos, self.val_2)
            self.nxt.scatter_(1, pos, self.dst)
