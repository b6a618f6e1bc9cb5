"""The WFST tensor engine's fixed-shape frame step (DESIGN rule 3): :class:`Search`, run as a device loop by
:mod:`.fixed` (CUDA graphs on a GPU), over a graph's :class:`GraphArrays`.

The search state is ``K`` token slots per utterance (``[Bb, K]`` states, scores, history refs; an empty
slot holds the dummy state ``S``), each utterance's tokens in the slots' order (the order every tie
rule of the search depends on, as in the native engine). One frame:

1. **emitting expansion** into a fixed budget of ``M`` candidates for the whole batch: each slot's
   arc count (0 for empty slots and finished utterances), their running sum, and ``searchsorted``
   gives every candidate its (slot, arc); candidates are in (utterance, token, arc) order. With the
   decoder's dense rows (and ``min_active`` 0) it is **pre-pruned** as the per-frame CPU loop is: a token
   in a dense state reads only the labels that can still reach the beam (a prefix of the frame's labels
   sorted best first), in two levels (a budget ``M1`` of items, then the arcs). A frame needing more
   than a budget sets the overflow flag (the call then runs again with a larger one; arcs are never
   dropped silently). A round's capacity checks are queued and settled together at its end
   (:meth:`Search._settle`: a dozen ops instead of five per check; a check after an overflow counts no
   need, as one by one);
2. **prune**: the beam (best - beam; each utterance's best as the best of its slots' bests),
   recombination by destination state through a dense
   ``[Bb * S]`` scratch (one ``scatter_reduce`` amax of ``(score, -candidate order)`` packed in an
   int64: highest score, earliest candidate on ties), the winners laid out in rows of ``C`` per
   utterance (in the plain (slot, arc) order; more sets the overflow flag), ``min_active`` /
   ``max_active`` as a stable sort of the rows (score, then earlier first), the ``K`` slots filled by
   gathers (slot ``j`` takes its row's ``j``-th kept entry);
3. **epsilon passes** (``eps_depth``): the frontier's epsilon arcs, pruned and recombined with the slots'
   tokens (order: the slots, then each slot's arcs), the same selection into the slots; the new
   survivors are the next frontier; an utterance without epsilon candidates keeps its tokens. A graph
   of small epsilon degree ``P`` (``eps_dense``: at most :data:`~.fixed.DENSE_EPSILON_DEGREE`, as a TLG's
   backoff arcs) runs them in dense rows of ``K * (1 + P)`` columns per utterance (~60 ops a pass); a
   larger one expands the arcs into a budget ``Me`` and lays the winners in rows of ``Ce`` after each
   utterance's ``K`` slots (fewer elements, ~140 ops a pass).

History entries go to a record ``[stages, Bb, K]`` (predecessor ref, word, ``2 * token + starts``)
that is compacted into the state's :class:`~.stream_state.History` after the call (predecessors first).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .lattice import take1d
from .stream_state import History, Tokens

__all__ = ["GraphArrays", "Search"]

_NEG = float("-inf")
_MIN64 = torch.iinfo(torch.int64).min
_EPS_LAB2 = -2  # an epsilon entry's 2 * token + starts: token -1, starts 0


class GraphArrays:
    """A graph's arrays the fixed-shape step reads, with a dummy state ``S`` (no arcs) for empty slots:
    ``e_lo, e_deg, p_lo, p_deg [S + 1]``, the packed emitting arc rows ``[A, 4]`` int32 and their columns
    ``c_lab2, c_dst, c_word [A]`` int32, ``c_score [A]`` float32, epsilon arcs
    ``p_dst, p_olabel [Ap]`` int64 and ``p_score [Ap]`` float32; ``P`` the largest epsilon degree,
    ``D`` the largest emitting degree (host ints, read once per graph)."""

    def __init__(self, g: Any, rows: torch.Tensor, dense: tuple | None = None,
                 emit_max: torch.Tensor | None = None) -> None:
        self.graph, self.rows = g, rows
        self.S = g.num_states
        zero = torch.zeros(1, dtype=torch.int64, device=g.device)
        e_ptr, p_ptr = g.e_ptr.long(), g.p_ptr.long()
        self.e_lo = e_ptr.clone()
        self.e_deg = torch.cat([e_ptr[1:] - e_ptr[:-1], zero])
        self.p_lo = p_ptr.clone()
        self.p_deg = torch.cat([p_ptr[1:] - p_ptr[:-1], zero])
        self.p_dst, self.p_olabel = g.p_dst.long(), g.p_olabel.long()
        self.p_score = g.p_score.float()
        self.D, self.P = torch.stack([self.e_deg.max(), self.p_deg.max()]).tolist()
        # the emitting rows' columns, each contiguous: four 1-D gathers per frame instead of one row
        # gather (on a GPU the [A, 4] row gather took 20x the time of a column's)
        cols = rows.t().contiguous()
        self.c_lab2, self.c_dst, self.c_word = cols[0], cols[1], cols[2]
        self.c_score = cols[3].view(torch.float32)
        self.A, self.Ap = int(rows.shape[0]), int(self.p_dst.shape[0])
        self.eps_depth = int(g.eps_depth) if self.P > 0 else 0
        self.Vg = int(g.vocab_size)
        # acoustic pre-pruning (the dynamic loop's, :meth:`WFSTDecoder._candidates`): the decoder's dense
        # ``(state, token) -> arcs`` rows and each state's best emitting arc score; off without dense rows
        self.pre = dense is not None and emit_max is not None and int(dense[2].numel()) > 0
        if self.pre:
            assert dense is not None and emit_max is not None
            row, ptr, arcs, _ = dense
            none = torch.full((1,), -1, dtype=torch.int64, device=g.device)
            self.d_row = torch.cat([row.long(), none])
            self.d_ptr, self.d_arcs = ptr.long(), arcs.long()
            # each dense arc's offset within its state's emitting arcs (the tie order of the plain expansion)
            self.d_off = self.d_arcs - torch.index_select(self.e_lo, 0, g.e_src.long()[self.d_arcs])
            self.e_max = torch.cat([emit_max.float(), torch.full((1,), _NEG, device=g.device)])
            # the largest degree of a state without a dense row (the bound's expansion of a sparse best token)
            self.Dsp = max(int(torch.where(self.d_row < 0, self.e_deg, 0).max()), 1)

    def key(self) -> tuple:
        g = self.graph
        return (id(self), g.num_states, self.rows.data_ptr(), g.p_dst.data_ptr(), g.p_score.data_ptr())


def _mono(score: torch.Tensor) -> torch.Tensor:
    """Float32 scores as int64 in the same order (``-0.0`` as ``+0.0``: they compare equal)."""
    bits = (score + 0.0).view(torch.int32)
    return torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).long()


class Search:
    """Static buffers of the fixed-shape search for ``Bb`` utterances, ``K`` slots (rows of ``C`` winners,
    a budget of ``M`` emitting candidates per frame) and ``stages`` record stages; ``boost [Bb, W]`` or None."""

    def __init__(self, ga: GraphArrays, *, Bb: int, K: int, C: int, M: int, stages: int, beam: float,
                 max_active: int, min_active: int, boost_width: int, device: torch.device, eps_dense: bool,
                 M1: int = 0, Me: int = 0, Ce: int = 0) -> None:
        self.ga, self.Bb, self.K, self.C, self.M, self.stages = ga, Bb, K, C, M, stages
        self.beam, self.max_active, self.min_active = beam, max_active, min_active
        S, P, dev, i64 = ga.S, ga.P, device, torch.int64
        # the epsilon pass: dense rows of R = K * (1 + P) columns (the slots, then each slot's P epsilon arcs)
        # for a graph of small epsilon degree, else its candidates in a budget of Me for the batch and its
        # winners in rows of Ce per utterance (0: the bounds, K * P each)
        self.S, self.P = S, P
        self.eps_dense = eps_dense
        self.R = K * (1 + P)
        self.Me, self.Ce = (Me or Bb * K * max(P, 1)), min(Ce or K * max(P, 1), K * max(P, 1))
        eps_cands = Bb * self.R if self.eps_dense else Bb * K + self.Me
        # acoustic pre-pruning with a budget of M1 expansion items (tie order by (slot, arc offset) in the low
        # 32 bits: needs K * D below 2**32; rows sorted by that order and the candidate packed in an int64:
        # M below 2**31)
        self.pre = ga.pre and M1 > 0 and not min_active and K * max(ga.D, 1) < 2**32 and M < 2**31
        self.M1 = M1 if self.pre else 0
        if self.pre:
            self.ar_M1 = torch.arange(M1, device=dev)
            self.ar_Dsp = torch.arange(ga.Dsp, device=dev)
            # the utterance of each bound arc, of each label
            self.b_dsp = torch.arange(Bb, device=dev).repeat_interleave(ga.Dsp)
            self.b_V = torch.arange(Bb, device=dev).repeat_interleave(ga.Vg)
        self.tok_s = torch.full((Bb, K), S, dtype=i64, device=dev)
        self.tok_sc = torch.full((Bb, K), _NEG, device=dev)
        self.tok_h = torch.full((Bb, K), -1, dtype=i64, device=dev)
        self.front = torch.zeros((Bb, K), dtype=torch.bool, device=dev)
        self.boost = torch.zeros((Bb, boost_width), device=dev) if boost_width else None
        self.over = torch.zeros(1, dtype=torch.bool, device=dev)
        # most candidates in a frame, most winners of a row, most expansion items in a frame (pre-pruning)
        # ... most epsilon candidates in a pass, most epsilon winners of a row
        self.need = torch.zeros(5, dtype=i64, device=dev)
        self.rec_prev = torch.full((stages, Bb, K), -1, dtype=i64, device=dev)
        self.rec_word = torch.full((stages, Bb, K), -1, dtype=i64, device=dev)
        # (an epsilon stage's entries are all _EPS_LAB2: written here once, the emitting stages each frame)
        self.rec_lab2 = torch.full((stages, Bb, K), _EPS_LAB2, dtype=i64, device=dev)
        # recombination scratch: a key per (utterance, state), then one per candidate that takes no part
        # (distinct addresses: on a GPU, atomics of every pruned candidate on one dummy key serialise)
        self.scratch = torch.full((Bb * S + max(M, eps_cands),), _MIN64, dtype=i64, device=dev)
        self.ar_M = torch.arange(M, device=dev)
        self.ar_B = torch.arange(Bb, device=dev)
        self.ar_K = torch.arange(K, device=dev)
        self.slot_id = torch.arange(Bb * K, device=dev).view(Bb, K)
        self.ar_K1 = (self.ar_K + 1).repeat(Bb, 1)  # [Bb, K]: 1..K in each row (the kept entries' ranks)
        self.slot_b = torch.div(self.slot_id.view(-1), K, rounding_mode="floor")  # each slot's utterance
        self.slot_k = self.slot_id.view(-1) % K  # and column
        # the epsilon pass's tie order (low 32 bits of its packed keys; higher is earlier): the slots by
        # column, then the epsilon candidates by slot, then arc (dense: the row's columns; budget: the flat order)
        if self.eps_dense:
            self.ar_P = torch.arange(P, device=dev)
            self.eps_low = self.R - 1 - torch.arange(self.R, device=dev)
            self.b_S = self.ar_B[:, None] * S  # [Bb, 1]: each row's first recombination key
        else:
            self.eps_low_o = self.Me + K - 1 - self.slot_k
            self.eps_low_c = self.Me - 1 - torch.arange(self.Me, device=dev)
        self.ar_C = torch.arange(C, device=dev)
        # 0.. of the longest per-frame row a step numbers (candidates, a row of winners, spare targets)
        self.ar_any = torch.arange(max(M, eps_cands, Bb * (K + self.Ce), Bb * C), device=dev)
        # distinct spare cells past the recombination keys (Bb * S) and past the slots (Bb * K), made once
        self.key_spare = Bb * S + self.ar_any[:max(M, eps_cands)]
        self.slot_spare = Bb * K + self.ar_any[:max(M, eps_cands)]
        # int64 fills (they promote gathered int32 columns; -1: the slots' columns' words of an epsilon row)
        self.minus1 = torch.full((Bb, K), -1, dtype=i64, device=dev)
        self.zeros_bk = torch.zeros((Bb, K), dtype=i64, device=dev)
        self.order_all = M - 1 - self.ar_M  # the plain expansion's tie order
        self.neg = torch.full((), _NEG, device=dev)
        self.zero1 = torch.zeros(1, dtype=i64, device=dev)
        self.pending: list | None = None  # a round's queued capacity checks (None: each check at once)
        self.set_schedule([])
        self.lock = threading.Lock()  # a call holds its buffers from loading to unloading

    def set_schedule(self, sched: list[tuple[int, int]]) -> None:
        """The capacity checks ``(need index, limit)`` a round makes, in order (:meth:`_settle`): their limits
        ``[m]``, which need each one counts for ``[5, m]`` and which checks come before each ``[m, m]``."""
        dev, m = self.need.device, len(sched)
        self.schedule = tuple(sched)
        self.sched_limit = torch.tensor([limit for _, limit in sched], dtype=torch.int64, device=dev)
        idx = torch.tensor([i for i, _ in sched], dtype=torch.int64, device=dev)
        self.sched_need = idx[None, :] == torch.arange(self.need.numel(), device=dev)[:, None]
        self.sched_before = torch.ones((m, m), dtype=torch.bool, device=dev).tril(-1)

    # -- prune ---------------------------------------------------------------------------------------
    def _recombine(self, key: torch.Tensor, comp: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """Winners (bool, like ``cand``) of recombination by ``key`` (utterance * S + state; only ``cand``
        take part): the highest packed ``comp`` (score, then earliest) of each key."""
        spare = self.key_spare[:cand.numel()].view(cand.shape)
        key = torch.where(cand, key, spare).view(-1)
        self.scratch.scatter_reduce_(0, key, comp.view(-1), "amax")
        win = cand & (take1d(self.scratch, key).view(cand.shape) == comp)
        self.scratch.index_fill_(0, key, _MIN64)
        return win

    def _utterance_max(self, score: torch.Tensor, slot: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``[Bb]`` the highest ``score [M]`` of each utterance's candidates (``slot [M]`` their token slot,
        ``valid [M]``; -inf for none): a max per slot by a scatter (a slot's arcs meet on one cell, the
        candidates past the budget's end on cells of their own), then a max over each utterance's slots.
        (A scatter-max straight into ``Bb`` cells makes every atomic wait on a few addresses on a GPU, and
        a running max over the ``M`` candidates is one slow sequential scan there.)"""
        n, m = self.Bb * self.K, score.numel()
        cell = torch.where(valid, slot, self._spare(slot))
        per_slot = torch.full((n + m,), _NEG, device=score.device).scatter_reduce_(0, cell, score, "amax")
        return per_slot[:n].view(self.Bb, self.K).amax(1)

    def _keep_counts(self, win: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
        """``[Bb]`` how many of each row's winners ``win [Bb, R]`` stay: min_active (``inside``: the winners
        within the beam), then max_active."""
        n = win.sum(1)
        if self.min_active:
            n_in = (win & inside).sum(1)
            n = torch.where(n_in < n, torch.maximum(n_in, n.clamp(max=self.min_active)), n)
        return n.clamp(max=self.max_active)

    def _row_targets(self, win: torch.Tensor, b: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor,
                     width: int, need: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The winners ``win [n]`` of a flat candidate list (``b [n]`` their utterances, each utterance's
        candidates ``[starts, ends)``) laid out in rows of ``width`` per utterance, order kept: each
        candidate's target ``[n]`` in a ``[Bb * width]`` row buffer (past it, distinct spare places for the
        others) and the winners of each row ``[Bb]``; more than ``width`` sets the overflow flag (capacity
        ``need``)."""
        cw = torch.cumsum(win.long(), 0)
        cw0 = torch.cat([self.zero1, cw])  # winners before each flat position
        base = take1d(cw0, starts)
        n = take1d(cw0, ends) - base
        pos = cw - 1 - take1d(base, b)
        self._measure(need, n.max().view(1), width)
        spare = self.Bb * width + self._arange(win.numel())
        return torch.where(win & (pos < width), b * width + pos, spare), n

    def _select(self, score: torch.Tensor, win: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The best ``k [Bb]`` of each row's winners ``win [Bb, R]`` by (score, then earlier first)."""
        R = win.shape[1]
        if R <= self.max_active and not self.min_active:
            return win  # statically: no row can hold more than max_active
        masked = torch.where(win, score, self.neg)
        order = torch.sort(masked, dim=1, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(1, order, self._arange(R).expand(self.Bb, R))
        return win & (rank < k[:, None])

    def _measure(self, i: int, value: torch.Tensor, limit: int) -> None:
        """``value [1]`` as capacity ``i``'s need (:attr:`need`) unless an earlier check overflowed (the search
        after that is truncated: its counts would grow capacities for nothing); the overflow flag when it
        exceeds ``limit``. Inside a round (:attr:`pending` a list) the check is queued for
        :meth:`_settle`."""
        if self.pending is not None:
            self.pending.append((i, value, limit))
            return
        need = self.need[i:i + 1]
        need.copy_(torch.where(self.over, need, torch.maximum(need, value)))
        self.over |= value > limit

    def _settle(self, checks: list) -> None:
        """The queued checks ``(i, value [1], limit)`` of a round, in their order, as :meth:`_measure` would have
        made them one by one: a check counts unless an earlier one (or the flag before) overflowed. A dozen
        ops instead of five per check."""
        sched = tuple((i, limit) for i, _, limit in checks)
        if sched != self.schedule:
            raise RuntimeError(f"the round's capacity checks {sched} differ from its schedule {self.schedule}")
        value = torch.cat([v for _, v, _ in checks])  # [m]
        over = value > self.sched_limit
        earlier = (self.sched_before & over).any(1) | self.over  # [m]: an earlier check overflowed
        counted = torch.where(earlier, 0, value)  # (needs are never negative: 0 counts nothing)
        self.need.copy_(torch.maximum(self.need, torch.where(self.sched_need, counted, 0).amax(1)))
        self.over |= over.any()

    def _compact(self, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots' sources in the rows ``keep [Bb, R]``: ``(col, filled)`` ``[Bb, K]``, slot ``j`` of a row
        taking the column of its ``j``-th kept entry (order kept) when ``filled``; sets the overflow flag when a
        row keeps more than ``K``. (A gather per field of ``[Bb, K]`` instead of a scatter of the whole row.)"""
        pos = torch.cumsum(keep.long(), 1)
        n = pos[:, -1]
        self._measure(1, n.max().view(1), self.K)
        col = torch.searchsorted(pos, self.ar_K1).clamp_(max=keep.shape[1] - 1)
        return col, self.ar_K[None, :] < n[:, None]

    def _write_tokens(self, row: torch.Tensor, s: torch.Tensor, sc: torch.Tensor, h: torch.Tensor,
                      front: torch.Tensor) -> None:
        """The slots' new states, scores and history refs ``[Bb, K]`` into the rows ``row [Bb, 1]`` (the others
        keep theirs; one ``where`` written in place per field) and the frontier ``row & front``."""
        torch.where(row, s, self.tok_s, out=self.tok_s)
        torch.where(row, sc, self.tok_sc, out=self.tok_sc)
        torch.where(row, h, self.tok_h, out=self.tok_h)
        torch.logical_and(row, front, out=self.front)

    def _spare(self, like: torch.Tensor) -> torch.Tensor:
        """Distinct targets past the ``Bb * K`` slots, one per entry of ``like`` (dropped entries of a
        scatter: on a GPU, one shared dummy target serialises their writes): a view of the table made once
        when it is long enough."""
        n = like.numel()
        spare = self.slot_spare[:n] if n <= self.slot_spare.numel() else self.Bb * self.K + self._arange(n)
        return spare if like.dim() == 1 else spare.view(like.shape)

    def _arange(self, n: int) -> torch.Tensor:
        """``0..n-1``: a view of the buffer made once when the frame steps' sizes ask (no kernel per step)."""
        return self.ar_any[:n] if n <= self.ar_any.numel() else torch.arange(n, device=self.ar_any.device)

    def _scatter_slots(self, tgt: torch.Tensor, fill: Any, values: torch.Tensor) -> torch.Tensor:
        """``[Bb, K]`` slots filled with ``fill``, ``values`` scattered to their targets ``tgt`` (same shape;
        dropped entries target :meth:`_spare` positions)."""
        n = self.Bb * self.K
        out = torch.full((n + tgt.numel(),), fill, dtype=values.dtype, device=values.device)
        return out.scatter_(0, tgt.view(-1), values.reshape(-1))[:n].view(self.Bb, self.K)

    # -- expansion -------------------------------------------------------------------------------------
    def _expand_all(self, live: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every emitting arc of every live token within the budget ``M``: ``(slot, arc, valid, order)``
        ``[M]`` each (``order``: higher for earlier candidates, the plain (utterance, slot, arc) order) and
        each utterance's candidate range ``starts, ends [Bb]``."""
        ga, Bb, K, M = self.ga, self.Bb, self.K, self.M
        s = self.tok_s.view(-1)
        deg = (take1d(ga.e_deg, s).view(Bb, K) * live[:, None]).view(-1)
        cum = torch.cumsum(deg, 0)
        total = cum[-1:]
        self._measure(0, total, M)
        slot = torch.searchsorted(cum, self.ar_M, right=True).clamp_(max=Bb * K - 1)
        valid = self.ar_M < total
        first = take1d(ga.e_lo, s) - (cum - deg)  # [Bb * K] each slot's first arc, less its first candidate
        arc = torch.where(valid, take1d(first, slot) + self.ar_M, 0)
        # each utterance's candidates [starts, ends) of the flat order (clamped to the budget: an
        # overflowing frame's results are dropped and the call reruns)
        ends = cum.view(Bb, K)[:, -1].clamp(max=M)
        starts = (ends - deg.view(Bb, K).sum(1)).clamp_(min=0)
        return slot, arc, valid, self.order_all, starts, ends

    def _expand_pruned(self, am: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`_expand_all` with acoustic pre-pruning (the dynamic loop's rule, with static shapes): a token
        in a state with a dense row reads only the labels ``k`` with ``am[b, k] >= cutoff[b] - e_max[state] -
        max boost - its score``, where ``cutoff`` (a lower bound of the frame's best minus the beam) comes
        from the best token's own arcs; every arc skipped would fail the beam. With the frame's labels sorted
        (best first), such a token's labels are a prefix (one ``searchsorted``); its arcs per label come from
        the dense rows. Two budgets: ``M1`` items (a sparse token's arcs, a dense token's labels), then ``M``
        arcs. Candidates are not in the plain order (a dense token's labels go best first): ``order`` is
        computed from (slot, arc offset)."""
        ga, Bb, K, M, M1, V, Vg = self.ga, self.Bb, self.K, self.M, self.M1, am.shape[1], self.ga.Vg
        N, neg = Bb * K, self.neg
        s = self.tok_s.view(-1)
        sc = self.tok_sc
        flat_am = am.reshape(-1)
        vals, idx = torch.sort(am[:, :Vg], dim=1, descending=True)  # [Bb, Vg] the frame's labels, best first
        drow = take1d(ga.d_row, s)
        dense = (drow >= 0).view(Bb, K)
        sdeg = take1d(ga.e_deg, s).view(Bb, K)
        bmax = None if self.boost is None else self.boost.amax(1).clamp(min=0)
        # the bound: the best token with emitting arcs, through its sparse arcs or its dense row's labels
        best, bk = torch.where(sdeg > 0, sc, neg).max(1)
        bslot = self.ar_B * K + bk
        bst, brow = take1d(s, bslot), take1d(drow, bslot)
        a_arc = (take1d(ga.e_lo, bst)[:, None] + self.ar_Dsp).clamp_(max=ga.A - 1)  # [Bb, Dsp]
        a_ok = self.ar_Dsp < (take1d(ga.e_deg, bst) * (brow < 0))[:, None]
        a_arc = a_arc.view(-1)
        b_dsp = self.b_dsp
        est_a = take1d(ga.c_score, a_arc) + take1d(flat_am, b_dsp * V + (take1d(ga.c_lab2, a_arc) >> 1))
        key = (brow.clamp(min=0)[:, None] * Vg + idx).view(-1)
        lo = take1d(ga.d_ptr, key)
        b_ok = (brow >= 0)[:, None] & (take1d(ga.d_ptr, key + 1) > lo).view(Bb, Vg)
        b_arc = take1d(ga.d_arcs, lo.clamp(max=max(ga.d_arcs.numel() - 1, 0)))
        est_b = take1d(ga.c_score, b_arc) + vals.reshape(-1)
        if bmax is not None:
            W = self.boost.shape[1]  # type: ignore[union-attr]  # bmax is set with the boost
            est_a = est_a + take1d(self.boost.view(-1), b_dsp * W + take1d(ga.c_word, a_arc))  # type: ignore[union-attr]
            est_b = est_b + take1d(self.boost.view(-1), self.b_V * W + take1d(ga.c_word, b_arc))  # type: ignore[union-attr]
        est = torch.maximum(torch.where(a_ok, est_a.view(Bb, -1), neg).amax(1),
                            torch.where(b_ok, est_b.view(Bb, Vg), neg).amax(1))
        cutoff = best + est - self.beam
        # each dense token's threshold (a little lower: float rounding never drops a survivor)
        thr = cutoff[:, None] - take1d(ga.e_max, s).view(Bb, K) - sc
        if bmax is not None:
            thr = thr - bmax[:, None]
        thr = thr - (1e-4 * thr.abs() + 1e-3)
        d_live = dense & live[:, None] & (sc > _NEG)
        thr = torch.where(d_live, thr, float("inf"))
        count = torch.searchsorted(-vals, -thr, right=True)  # [Bb, K]: the labels at or above thr
        # level 1: items
        deg1 = (torch.where(dense, count, sdeg) * live[:, None]).view(-1)
        cum1 = torch.cumsum(deg1, 0)
        tot1 = cum1[-1:]
        self._measure(2, tot1, M1)
        slot1 = torch.searchsorted(cum1, self.ar_M1, right=True).clamp_(max=N - 1)
        j = self.ar_M1 - take1d(cum1 - deg1, slot1)
        r1 = take1d(drow, slot1)
        d1 = r1 >= 0
        b1 = torch.div(slot1, K, rounding_mode="floor")
        k1 = take1d(idx.view(-1), b1 * Vg + j.clamp(max=Vg - 1))
        key1 = r1.clamp(min=0) * Vg + k1
        plo = take1d(ga.d_ptr, key1)
        n1 = torch.where(self.ar_M1 < tot1, torch.where(d1, take1d(ga.d_ptr, key1 + 1) - plo, 1), 0)
        # level 2: arcs
        cum2 = torch.cumsum(n1, 0)
        total = cum2[-1:]
        self._measure(0, total, M)
        it = torch.searchsorted(cum2, self.ar_M, right=True).clamp_(max=M1 - 1)
        valid = self.ar_M < total
        q = self.ar_M - take1d(cum2 - n1, it)
        slot = take1d(slot1, it)
        pos = (take1d(plo, it) + q).clamp_(min=0, max=max(ga.d_arcs.numel() - 1, 0))
        dense_it, j_it = take1d(d1, it), take1d(j, it)
        arc = torch.where(dense_it, take1d(ga.d_arcs, pos), take1d(ga.e_lo, take1d(s, slot)) + j_it)
        arc = torch.where(valid, arc, 0)
        off = torch.where(dense_it, take1d(ga.d_off, pos), j_it)  # the arc's offset within its state
        order = K * max(ga.D, 1) - 1 - ((slot % K) * max(ga.D, 1) + off)
        # each utterance's candidates [starts, ends): its items' range mapped through the arcs' running sum
        ends1 = cum1.view(Bb, K)[:, -1].clamp(max=M1)
        starts1 = (ends1 - deg1.view(Bb, K).sum(1)).clamp_(min=0)
        cum2_0 = torch.cat([self.zero1, cum2])
        ends = take1d(cum2_0, ends1).clamp(max=M)
        starts = take1d(cum2_0, starts1).clamp(max=M)
        return slot, arc, valid, order, starts, ends

    # -- stages --------------------------------------------------------------------------------------
    def emitting(self, am: torch.Tensor, live: torch.Tensor, r: torch.Tensor) -> None:
        """The emitting stage of a frame: ``am [Bb, V]`` scaled log-probs, ``live [Bb]`` utterances with this
        frame, ``r [1]`` the record stage."""
        ga, Bb, K, M, S, V = self.ga, self.Bb, self.K, self.M, self.S, am.shape[1]
        if self.pre:
            slot, arc, valid, order, starts, ends = self._expand_pruned(am, live)
        else:
            slot, arc, valid, order, starts, ends = self._expand_all(live)
        # (int32 columns: an index they enter is int64 by promotion, the slots' fills below are int64 tensors)
        lab2, dst, word = take1d(ga.c_lab2, arc), take1d(ga.c_dst, arc), take1d(ga.c_word, arc)
        b = torch.div(slot, K, rounding_mode="floor")
        score = take1d(self.tok_sc.view(-1), slot) + take1d(ga.c_score, arc)
        score = score + take1d(am.reshape(-1), b * V + (lab2 >> 1))
        if self.boost is not None:
            score = score + take1d(self.boost.view(-1), b * self.boost.shape[1] + word)
        score = torch.where(valid, score, self.neg)
        valid = score > self.neg  # a -inf score (a class of probability 0) is no path, never a token
        top = self._utterance_max(score, slot, valid)
        inside = valid & (score >= take1d(top - self.beam, b))
        cand = valid if self.min_active else inside
        comp = (_mono(score) << 32) + order
        win = self._recombine(b * S + dst, comp, cand)
        # the winners in rows of C per utterance, candidate order kept
        tgt, n = self._row_targets(win, b, starts, ends, self.C, 1)
        if self.pre:  # the rows in the plain order (slot, then arc) the other stages expect: each row sorted
            # by (order, candidate) packed in one int64 (order < 2**32, M < 2**31), empty places last
            packed = torch.full((Bb * self.C + M,), -1, dtype=torch.int64, device=am.device)
            packed = packed.scatter_(0, tgt, order * M + self.ar_M)[: Bb * self.C].view(Bb, self.C)
            src = torch.sort(packed, dim=1, descending=True).values.remainder(M)
        else:
            src = torch.zeros(Bb * self.C + M, dtype=torch.int64, device=am.device).scatter_(0, tgt, self.ar_M)
            src = src[: Bb * self.C].view(Bb, self.C)
        r_win = self.ar_C[None, :] < n.clamp(max=self.C)[:, None]
        r_score = torch.where(r_win, take1d(score, src.view(-1)).view(Bb, self.C), self.neg)
        if self.min_active:  # the winners within the beam (without min_active, every winner is)
            r_in = take1d(inside.to(torch.uint8), src.view(-1)).view(Bb, self.C) > 0
        else:
            r_in = r_win
        keep = self._select(r_score, r_win, self._keep_counts(r_win, r_in))
        col, filled = self._compact(keep)
        idx = torch.gather(src, 1, col).view(-1)  # each slot's candidate

        def slots(values: torch.Tensor, fill: Any) -> torch.Tensor:
            return torch.where(filled, take1d(values, idx).view(Bb, K), fill)

        new_s, new_sc = slots(dst, S), slots(score, _NEG)
        new_prev = slots(take1d(self.tok_h.view(-1), slot), -1)
        new_word, new_lab2 = slots(word, self.minus1), slots(lab2, self.zeros_bk)
        new_h = torch.where(filled, r * (Bb * K) + self.slot_id, -1)
        self._write_tokens(live[:, None], new_s, new_sc, new_h, filled)
        self.rec_prev.index_copy_(0, r, new_prev[None])
        self.rec_word.index_copy_(0, r, new_word[None])
        self.rec_lab2.index_copy_(0, r, new_lab2[None])

    def epsilon(self, r: torch.Tensor) -> None:
        """One epsilon pass from the frontier slots; ``r [1]`` the record stage (dense rows or a budget)."""
        if self.eps_dense:
            self._epsilon_dense(r)
        else:
            self._epsilon_budget(r)

    def _epsilon_dense(self, r: torch.Tensor) -> None:
        """One epsilon pass over dense rows of ``R = K * (1 + P)`` columns per utterance (the slots, then each
        slot's ``P`` epsilon arcs, absent ones invalid): pruned and recombined, the winners selected and
        compacted into the slots; the new survivors are the next frontier. Fewer ops than the budget's
        expansion (no running sums, no winner rows) for a graph of small epsilon degree."""
        ga, Bb, K, P, S = self.ga, self.Bb, self.K, self.P, self.S
        N = Bb * K
        s = self.tok_s.view(-1)
        pdeg = take1d(ga.p_deg, s) * self.front.view(-1)
        cvalid = self.ar_P < pdeg[:, None]  # [N, P]
        arc = (take1d(ga.p_lo, s)[:, None] + self.ar_P).clamp_(max=max(ga.Ap - 1, 0)).view(-1)
        word = take1d(ga.p_olabel, arc)
        csc = self.tok_sc.view(N, 1) + take1d(ga.p_score, arc).view(N, P)
        if self.boost is not None:
            at = (self.slot_b * self.boost.shape[1])[:, None] + word.view(N, P)  # [N, P] in the flat boosts
            csc = csc + take1d(self.boost.view(-1), at.view(-1)).view(N, P)
        csc = torch.where(cvalid, csc, self.neg)
        has = pdeg.view(Bb, K).amax(1) > 0  # utterances with epsilon candidates (the others keep their tokens)
        m_s = torch.cat([self.tok_s, take1d(ga.p_dst, arc).view(Bb, K * P)], 1)  # [Bb, R]
        m_sc = torch.cat([self.tok_sc, csc.view(Bb, K * P)], 1)
        m_valid = torch.cat([self.tok_s < S, cvalid.view(Bb, K * P)], 1)
        inside = m_valid & (m_sc >= (m_sc.amax(1) - self.beam)[:, None])
        cand = m_valid if self.min_active else inside
        win = self._recombine(self.b_S + m_s, (_mono(m_sc) << 32) + self.eps_low, cand)
        keep = self._select(m_sc, win, self._keep_counts(win, inside))
        col, filled = self._compact(keep)
        new_s = torch.where(filled, torch.gather(m_s, 1, col), S)
        new_sc = torch.where(filled, torch.gather(m_sc, 1, col), _NEG)
        is_new = col >= K  # an epsilon arc's token, not a slot's
        new_flag = filled & is_new
        # the source slot's history ref: the token's own (a slot's column) or its predecessor's (an arc's)
        src_h = torch.gather(self.tok_h, 1, torch.where(is_new, torch.div(col - K, P, rounding_mode="floor"), col))
        new_word = torch.where(new_flag, torch.gather(torch.cat([self.minus1, word.view(Bb, K * P)], 1), 1, col), -1)
        new_h = torch.where(new_flag, r * N + self.slot_id, torch.where(filled, src_h, -1))
        row = has[:, None]
        self._write_tokens(row, new_s, new_sc, new_h, new_flag)
        self.rec_prev.index_copy_(0, r, torch.where(self.front, src_h, -1)[None])
        self.rec_word.index_copy_(0, r, torch.where(row, new_word, -1)[None])

    def _epsilon_budget(self, r: torch.Tensor) -> None:
        """One epsilon pass from the frontier slots; ``r [1]`` the record stage. The frontier's epsilon arcs
        are expanded by cumsum + searchsorted into the budget ``Me``; with the slots' tokens they are pruned
        and recombined, the winners among them laid out in rows of ``Ce`` after each utterance's ``K`` slots
        (their order: the slots, then each slot's arcs), selected and compacted into the slots."""
        ga, Bb, K, S, Me, Ce = self.ga, self.Bb, self.K, self.S, self.Me, self.Ce
        N = Bb * K
        s = self.tok_s.view(-1)
        pdeg = take1d(ga.p_deg, s) * self.front.view(-1)
        cum = torch.cumsum(pdeg, 0)
        total = cum[-1:]
        self._measure(3, total, Me)
        ar = self._arange(Me)
        slot = torch.searchsorted(cum, ar, right=True).clamp_(max=N - 1)
        valid = ar < total
        p = ar - (take1d(cum, slot) - take1d(pdeg, slot))
        arc = (take1d(ga.p_lo, take1d(s, slot)) + p).clamp_(max=max(ga.Ap - 1, 0))
        b = torch.div(slot, K, rounding_mode="floor")
        cdst, word = take1d(ga.p_dst, arc), take1d(ga.p_olabel, arc)
        csc = take1d(self.tok_sc.view(-1), slot) + take1d(ga.p_score, arc)
        if self.boost is not None:
            csc = csc + take1d(self.boost.view(-1), b * self.boost.shape[1] + word)
        csc = torch.where(valid, csc, self.neg)
        n_eps = pdeg.view(Bb, K).sum(1)
        has = n_eps > 0  # utterances with epsilon candidates (the others keep their tokens)
        on = s < S
        top = torch.maximum(self.tok_sc.amax(1), self._utterance_max(csc, slot, valid))
        cut = top - self.beam
        inside_o = on & (self.tok_sc.view(-1) >= take1d(cut, self.slot_b))
        inside_c = valid & (csc >= take1d(cut, b))
        cand_o, cand_c = (on, valid) if self.min_active else (inside_o, inside_c)
        comp_o = (_mono(self.tok_sc.view(-1)) << 32) + self.eps_low_o
        comp_c = (_mono(csc) << 32) + self.eps_low_c
        win = self._recombine(torch.cat([self.slot_b * S + s, b * S + cdst]), torch.cat([comp_o, comp_c]),
                              torch.cat([cand_o, cand_c]))
        win_o, win_c = win[:N].view(Bb, K), win[N:]
        # the epsilon winners in rows of Ce per utterance, candidate order kept
        ends = cum.view(Bb, K)[:, -1].clamp(max=Me)
        tgt, n = self._row_targets(win_c, b, (ends - n_eps).clamp_(min=0), ends, Ce, 4)
        src = torch.zeros(Bb * Ce + Me, dtype=torch.int64, device=s.device).scatter_(0, tgt, ar)[: Bb * Ce]
        r_win = (self._arange(Ce)[None, :] < n.clamp(max=Ce)[:, None]).view(-1)
        # the pass's rows: the K slots, then the Ce winners
        m_s = torch.cat([self.tok_s, take1d(cdst, src).view(Bb, Ce)], 1)
        m_sc = torch.cat([self.tok_sc, torch.where(r_win, take1d(csc, src), self.neg).view(Bb, Ce)], 1)
        m_win = torch.cat([win_o, r_win.view(Bb, Ce)], 1)
        m_in = torch.cat([inside_o.view(Bb, K), (r_win & take1d(inside_c, src)).view(Bb, Ce)], 1)
        keep = self._select(m_sc, m_win, self._keep_counts(m_win, m_in))
        col, filled = self._compact(keep)
        new_s = torch.where(filled, torch.gather(m_s, 1, col), S)
        new_sc = torch.where(filled, torch.gather(m_sc, 1, col), _NEG)
        new_flag = filled & (col >= K)  # an epsilon arc's token, not a slot's
        idx = take1d(src, (self.ar_B[:, None] * Ce + (col - K).clamp_(min=0)).view(-1))  # its candidate
        new_prev = torch.where(new_flag, take1d(take1d(self.tok_h.view(-1), slot), idx).view(Bb, K), -1)
        new_word = torch.where(new_flag, take1d(word, idx).view(Bb, K), -1)
        old_h = torch.where(filled, torch.gather(self.tok_h, 1, col.clamp(max=K - 1)), -1)
        new_h = torch.where(new_flag, r * (Bb * K) + self.slot_id, old_h)
        row = has[:, None]
        self._write_tokens(row, new_s, new_sc, new_h, new_flag)
        self.rec_prev.index_copy_(0, r, torch.where(row, new_prev, -1)[None])
        self.rec_word.index_copy_(0, r, torch.where(row, new_word, -1)[None])

    # -- state in and out ----------------------------------------------------------------------------
    def load_tokens(self, toks: Tokens, B: int) -> torch.Tensor:
        """Put the flat tokens ``toks`` (utterances ``< B``) into the slots, each utterance's order kept;
        returns their history ids by load position ``[Bb * K]`` (slot refs ``-1 - position`` point there).
        More than ``K`` tokens in an utterance sets the overflow flag."""
        Bb, K, dev = self.Bb, self.K, self.tok_s.device
        order = torch.argsort(toks.b, stable=True)
        b = take1d(toks.b, order)
        n = torch.zeros(Bb, dtype=torch.int64, device=dev).index_add_(0, b, torch.ones_like(b))
        rank = torch.arange(b.shape[0], device=dev) - take1d(torch.cumsum(n, 0) - n, b)
        self._measure(1, n.max().view(1), K)
        tgt = torch.where(rank < K, b * K + rank, self._spare(rank))
        self.tok_s.copy_(self._scatter_slots(tgt, self.S, take1d(toks.s, order).long()))
        self.tok_sc.copy_(self._scatter_slots(tgt, _NEG, take1d(toks.score, order).float()))
        hid = self._scatter_slots(tgt, -1, take1d(toks.hid, order).long())
        filled = self.tok_s < self.S
        self.tok_h.copy_(torch.where(filled, -1 - self.slot_id, -1))
        return hid.view(-1)

    def unload(self, B: int, stages: int, loaded_hid: torch.Tensor, hist: History, offset: torch.Tensor
               ) -> Tokens:
        """Append the first ``stages`` record stages' entries to ``hist`` (``offset [B]``: the utterances'
        frame offsets) and return the slots' tokens (utterances ``< B``) with their history ids."""
        Bb, K, dev = self.Bb, self.K, self.tok_s.device
        word = self.rec_word[:stages].reshape(-1)
        idx = torch.nonzero(word >= 0).squeeze(1)
        n = idx.shape[0]
        ids = torch.full((stages * Bb * K,), -1, dtype=torch.int64, device=dev)
        ids.index_copy_(0, idx, torch.arange(hist.size, hist.size + n, device=dev))

        def resolve(ref: torch.Tensor) -> torch.Tensor:
            """Record refs (ids, or ``-1 - load position``) as history ids."""
            inner = take1d(ids, ref.clamp(min=0, max=max(stages * Bb * K - 1, 0))) if stages else ref
            return torch.where(ref >= 0, inner, take1d(loaded_hid, (-1 - ref).clamp(min=0)))

        if n:
            prev = resolve(take1d(self.rec_prev[:stages].reshape(-1), idx))
            lab2 = take1d(self.rec_lab2[:stages].reshape(-1), idx)
            stage = torch.div(idx, Bb * K, rounding_mode="floor")
            b = torch.div(idx, K, rounding_mode="floor") % Bb
            frame = take1d(offset, b) + torch.div(stage, self.stages_per_frame, rounding_mode="floor") + self.frame0
            hist.add(prev, take1d(word, idx), frame, lab2 >> 1, (lab2 & 1) == 1)
        s = self.tok_s[:B].reshape(-1)
        on = torch.nonzero(s < self.S).squeeze(1)
        return Tokens(torch.div(on, K, rounding_mode="floor"), take1d(s, on), take1d(self.tok_sc[:B].reshape(-1), on),
                       resolve(take1d(self.tok_h[:B].reshape(-1), on)))

    stages_per_frame = 1
    frame0 = 0
