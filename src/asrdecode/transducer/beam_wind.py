"""One WIND beam-search step (RNN-T, method="wind"; Algorithm 3 of the WIND paper), torch engine.

The loop state (:class:`~asrdecode.transducer.beam_loop.BeamLoop`) keeps per-frame hypothesis lists in
a ring of ``window + 1`` lists of ``beam`` slots. A step, for every utterance that takes one: (1) pop the
list of the earliest frame, (2) Equation 1 over the window for its hypotheses, (3) the prefix search,
(4) each expanding hypothesis's ``beam`` best continuations, (5) every list merged with its arrivals and
pruned to ``beam``. The rules are those of
:func:`~asrdecode.transducer.reference_wind_beam.reference_wind_beam_search`.

A round is a GPU's kernel launches, so the step keeps its op count low (as the ALSD++ step does): the
window's candidates of every popped hypothesis are written into one preallocated ``[B, K, W, V]`` buffer
(the fusion scores added in place, the whole-window blank written into the blank column) and selected by
one ordered top-k; the popped hypotheses' integer fields are one gather of the packed ``fields [F, B, S]``
and repeat for their continuations by one expand; the merge pool ``[8, B, S + K*K]`` is a preallocated
buffer (carried fields copied, arrivals stacked in place); equal transcripts merge by one all-pairs
comparison (``[B, P, P]``: small, static; a large beam's pool by sorting); the fusion states advance by the scorer's prepared advance
(:meth:`~asrdecode.fusion.FusionScorer.prepare`: its buffers made once); no LM op runs without fusion.

One utterance's frame lists are popped one per round, smallest frame first, because two pops of one
utterance never commute in general (so a round cannot take several): a pop at frame ``t0`` sends its
continuations to frames ``t0 .. t0 + window`` (labels on their frame, the whole-window blank to the
window's end; which of them, only its scores decide), and each of those lists, once popped, sends on
again, so any frame ``t1 > t0`` may receive hypotheses from ``t0``'s pop or from a pop it causes before
``t1`` is the smallest pending frame (with window 1: ``t0``'s blank continuations go straight to
``t0 + 1``). Popping ``t1`` early would expand a list that the oracle expands only after those arrivals
were merged into it and pruned to ``beam`` (different hypotheses), and the arrivals would then form a
second list at ``t1``. Nor do two pops of one frame commute: the second pops what the first emitted
there. So the rounds of a call are the oracle's pops of its busiest utterance, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.functional import pad

from ..beam_hyps import extend_hash
from ..selection import ordered_topk
from .beam_alsd import stack_into, where_into
from ..fusion import weigh
from .blank_scoring import log_nonblank
from .model import checked_joint

#: a :class:`~asrdecode.transducer.beam_loop.BeamLoop` (not imported: that module imports this one)
BeamLoop = Any

__all__ = ["wind_step", "wind_buffers", "merge_equal", "merge_sorted", "PAIRWISE_MAX"]

_NEG_INF = float("-inf")
#: rows of the merge pool: the loop's fields (time, hash, nlabels, last, symbols), then the parent slot, the
#: token (-1: none) and the frame of the token; with fusion also the row of the entry's fusion state in the
#: step's state table (:func:`_merge`)
_POOL_ROWS = 8
#: the largest merge pool (``P = (window + 1) * beam + beam**2`` entries per utterance) merged by the all-pairs
#: comparison (``[B, P, P]``, a few ops); larger pools (beam 16 and more) take the sorted merge (O(P log P)
#: work, ~40 ops): all pairs would cost O(beam**4) per step
PAIRWISE_MAX = 160


def wind_buffers(loop: BeamLoop) -> None:
    """The WIND step's constants and preallocated buffers (set on ``loop`` once per loop): ``cand [B, K, W, V]``,
    each popped hypothesis's window candidates (``cand_blank`` its blank column, ``cand_first`` its first
    frame), the index views of the window, the merge pool (:func:`_pool_buffers`) and the fusion buffers
    (:func:`_fusion_buffers`)."""
    B, K, V, W = loop.B, loop.K, loop.V, loop.window
    dev = loop.score.device
    loop.is_blank = torch.arange(V, device=dev) == loop.blank  # [V]
    loop.win_3, loop.b_idx_3 = loop.win.view(1, 1, W), loop.b_idx.view(B, 1, 1)
    loop.lengths_3 = loop.lengths[..., None]  # [B, 1, 1] (a view: reset() writes the lengths in place)
    loop.q_rank = (torch.arange(K * K, device=dev) // K)[None, :]  # [1, Q]: the popped rank of each arrival
    loop.cand = torch.empty((B, K, W, V), dtype=loop.dtype, device=dev)
    loop.cand_blank = loop.cand.select(3, loop.blank)  # [B, K, W]
    loop.cand_flat = loop.cand.view(B, K, W * V)
    loop.cand_first = loop.cand.select(2, 0)  # [B, K, V]: the window's first frame
    _pool_buffers(loop)
    _fusion_buffers(loop)


def _pool_buffers(loop: BeamLoop) -> None:
    """``pool [8 (+1 with fusion), B, P]`` (``P = S + K*K``): the merge pool, carried slots then arrivals (the
    carried slots' parent, token and fusion-row entries constant), its views, and the tie order of the
    all-pairs merge (``pool_before [P, P]``: ``j < i``; None: the pool takes the sorted merge)."""
    B, K, S = loop.B, loop.K, loop.S
    P = S + K * K
    dev = loop.score.device
    loop.pool_before = (torch.arange(P, device=dev)[None, :] < torch.arange(P, device=dev)[:, None]
                        if P <= PAIRWISE_MAX else None)
    pool = loop.pool = torch.empty((_POOL_ROWS + int(loop.fused), B, P), dtype=torch.long, device=dev)
    pool[5, :, :S] = torch.arange(S, device=dev)  # a carried slot is its own parent, emits no token
    pool[6, :, :S] = -1
    if loop.fused:  # a carried slot keeps its fusion state: its row of lm_states
        pool[8, :, :S] = loop.flat_base + loop.slot_idx
    loop.pool_fields, loop.pool_frame, loop.pool_new = pool[:5, :, :S], pool[7, :, :S], pool[:, :, S:]
    loop.pool_time, loop.pool_hash, loop.pool_nl, loop.pool_last = pool[:4].unbind(0)
    loop.pool_key = pool[:4, :, :, None]  # [4, B, P, 1]: time, hash, nlabels, last (a transcript on a frame)
    loop.pool_key_t = pool[:4, :, None, :]  # [4, B, 1, P]


def _fusion_buffers(loop: BeamLoop) -> None:
    """``lm_pop [B*K, M]``: the popped hypotheses' fusion states; ``lm_prep``: their prepared advance (late
    pruning with fusion, scores into ``lm_scores [B*K, V]``; else None); ``lm_arrival_row [B, Q]``: where an
    arrival's label state lies in the step's state table (after ``lm_states``: late pruning, advance's next
    states ``[B*K, V, M]`` at row (popped hypothesis) * V + label; early, score_tokens' ``[B*K, K, M]``, one
    row per arrival)."""
    B, K, V, S = loop.B, loop.K, loop.V, loop.S
    dev = loop.score.device
    loop.lm_pop = torch.empty((B * K, loop.lm_states.shape[-1]), dtype=torch.long, device=dev)
    loop.lm_prep = None
    if not loop.fused:
        return
    popped = loop.b_idx * K + loop.q_rank  # [B, Q]: each arrival's popped hypothesis
    loop.lm_arrival_row = (B * S + popped * V if not loop.early
                           else B * S + torch.arange(B * K * K, device=dev).view(B, K * K))
    if not loop.early:
        loop.lm_scores = torch.empty((B * K, V), dtype=loop.dtype, device=dev)
        loop.lm_scores_4 = loop.lm_scores.view(B, K, 1, V)
        loop.lm_scores_bkv = loop.lm_scores.view(B, K, V)
        loop.lm_prep = loop.scorer.prepare(loop.lm_pop, loop.lm_scores, loop.dtype)


def wind_step(loop: BeamLoop) -> None:
    """One WIND step (module :mod:`~asrdecode.transducer.reference_wind_beam`, steps 1-5) for every
    utterance whose earliest frame list is popped: prefix search, windowed expansions (each
    hypothesis's ``beam`` best), then every frame list merged with its arrivals and pruned to ``beam``."""
    pop = _pop(loop)
    win = _window(loop, pop)
    expand = _prefix_search(loop, pop)
    _fuse(loop, win)
    _merge(loop, pop, _expansions(loop, pop, win, expand))


def _pop(loop: BeamLoop) -> "_WindPop":
    """Step 1: per utterance, the list of the earliest frame any hypothesis is on, and its hypotheses (with
    fusion: their states in ``loop.lm_pop``; late pruning: their fusion scores in ``loop.lm_scores``)."""
    B, K, R = loop.B, loop.K, loop.R
    go = loop.active  # [B, 1]
    pending = (loop.score > _NEG_INF) & (loop.time < loop.lengths)
    tmin = torch.where(pending, loop.time, torch.iinfo(torch.long).max).amin(dim=1, keepdim=True)
    tmin = torch.where(go, tmin, 0)  # [B, 1]
    # the popped list (whole utterances: offset 0, no op)
    r0 = torch.remainder(loop.offset + tmin if loop.streaming else tmin, R)
    pslots = torch.add(loop.k_idx, r0, alpha=K)  # [B, K]
    p_score = loop.score.gather(1, pslots)
    p_flat = (loop.flat_base + pslots).view(B * K)
    # the integer fields in one gather: time, hash, nlabels, last, symbols
    fields = loop.fields.gather(2, pslots.expand(loop.fields.shape[0], B, K))
    lm_next = None
    if loop.fused:
        torch.index_select(loop.lm_states, 0, p_flat, out=loop.lm_pop)
        if loop.lm_prep is not None:
            lm_next = loop.lm_prep.run()  # [B*K, V, M]; the weighted scores into loop.lm_scores
    return _WindPop(go=go, tmin=tmin, r0=r0, slots=pslots, score=p_score, fields=fields,
                    live=go & (p_score > _NEG_INF), flat=p_flat, lm_next=lm_next)


def _window(loop: BeamLoop, pop: "_WindPop") -> "_WindWindow":
    """Step 2: Equation 1 over the window for the popped hypotheses, without fusion, into ``loop.cand
    [B, K, W, V]``: column ``v`` of window frame ``j`` is label ``v`` first on frame ``j`` (blanks before it),
    ``-inf`` past the utterance's end (:func:`_fuse` then adds the fusion scores and the blank)."""
    B, K, W = loop.B, loop.K, loop.window
    frames = pop.tmin[..., None] + loop.win_3  # [B, 1, W]
    fvalid = frames < loop.lengths_3  # [B, 1, W]; the invalid frames are the window's end
    enc = loop.enc_proj[loop.b_idx_3, frames.clamp(max=loop.enc_proj.shape[1] - 1)]  # [B, 1, W, H] (T: as ALSD's)
    dec = loop.dec_proj.index_select(0, pop.flat).view(B, K, 1, -1)
    enc = enc.expand(B, K, W, enc.shape[-1])
    logits = checked_joint(loop.model, enc, dec)
    if logits.dtype != loop.dtype:
        logits = logits.to(loop.dtype)
    lp = torch.log_softmax(logits, dim=-1)  # [B, K, W, V]
    lpb = lp[..., loop.blank]  # [B, K, W]
    # (weigh: a masked class's -inf stays -inf at any lam, never NaN or +inf)
    blank_fr = weigh(lpb, 1.0 + loop.lam) if loop.lm_weighted else lpb
    # the blanks before each frame (the invalid frames are a suffix: a valid frame's sum has none), and at the
    # window's last valid frame the blank on all of it (a running sum, as the oracle's and the native engine's);
    # "before" is the running sum one frame back, never cum - blank_fr (-inf - -inf after a masked blank)
    cum = torch.cumsum(blank_fr, dim=-1)
    label_base = pad(cum[..., :-1], (1, 0))
    if loop.lm_weighted:
        label_base = label_base + weigh(log_nonblank(lp, loop.blank)[..., 0], loop.lam)
    if loop.beta:
        label_base = label_base + loop.beta
    label_base = torch.where(fvalid, label_base, loop.neg_inf)  # no label past the utterance's end
    last_frame = loop.win_3 == fvalid.sum(dim=-1, keepdim=True) - 1  # [B, 1, W]
    torch.add(label_base[..., None], lp, out=loop.cand)
    ac = None
    if loop.early:  # the acoustic scores (Equation 1 alone), the same layout
        blank_ac = torch.where(fvalid, lpb, 0.0)
        cum_ac = torch.cumsum(blank_ac, -1)
        ac = torch.where(fvalid[..., None], pad(cum_ac[..., :-1], (1, 0))[..., None] + lp, _NEG_INF)
        ac = torch.where(loop.is_blank, torch.where(last_frame, cum_ac, _NEG_INF)[..., None], ac)
    return _WindWindow(cum=cum, last_frame=last_frame, ac=ac)


def _prefix_search(loop: BeamLoop, pop: "_WindPop") -> torch.Tensor:
    """Step 3: ``B = A + (v,)`` on this frame gets A's paths "then v here" and A is removed (A's
    score updated in ``pop.score``). Returns which popped hypotheses expand ``[B, K]``."""
    B, K = loop.B, loop.K
    _, p_hash, p_nl, p_last, p_sym = pop.fields.unbind(0)
    # pair (b, a), [B, K(b), K(a)]: b live, b's transcript a's plus b's last label, a below the symbol cap
    # after one more label (a dead: its score -inf adds nothing)
    a_len = p_nl + 1
    if loop.max_symbols is not None:
        a_len = torch.where(p_sym < loop.max_symbols - 1, a_len, -1)  # (no transcript has length -1)
    pair = (pop.live[:, :, None] & (p_nl[:, :, None] == a_len[:, None, :])
            & (p_hash[:, :, None] == extend_hash(p_hash[:, None, :], p_last[:, :, None])))
    last_ab = p_last[:, None, :].expand(B, K, K)  # [B, K(a), K(b)]: b's last label
    complete = pop.score[:, :, None] + loop.cand_first.gather(2, last_ab)  # a's paths "then b's label here"
    if loop.early and loop.fused:
        lm_v, _ = loop.scorer.score_tokens(loop.lm_pop, last_ab.reshape(B * K, K), dtype=loop.dtype)
        complete = complete + lm_v.view(B, K, K)
    elif loop.lm_prep is not None:
        complete = complete + loop.lm_scores_bkv.gather(2, last_ab)
    pop.score = torch.logsumexp(torch.cat([pop.score[:, None, :], torch.where(pair.mT, complete, _NEG_INF)],
                                          dim=1), dim=1)
    return pop.live & ~pair.any(dim=1)


def _fuse(loop: BeamLoop, win: "_WindWindow") -> None:
    """The candidates' fusion scores (late pruning) and the blank on the whole window (the blank column of the
    window's last frame; ``-inf`` on the others), written into ``loop.cand``."""
    if loop.lm_prep is not None:
        loop.cand.add_(loop.lm_scores_4)
    where_into(loop.cand_blank, win.last_frame, win.cum, loop.neg_inf)


def _expansions(loop: BeamLoop, pop: "_WindPop", win: "_WindWindow", expand: torch.Tensor) -> "_WindArrivals":
    """Step 4: each expanding hypothesis's ``K`` best (label, frame) or whole-window blank continuations."""
    B, K, V = loop.B, loop.K, loop.V
    Q = K * K
    M = loop.lm_states.shape[-1]
    lm_next = pop.lm_next
    if win.ac is not None:  # early pruning: the K best by the acoustic score, then fused
        rank, col = ordered_topk(win.ac.view(B, K, -1), K)  # [B, K, K]
        val = loop.cand_flat.gather(2, col)
        if loop.fused:
            lm_s, lm_nx = loop.scorer.score_tokens(loop.lm_pop, (col % V).view(B * K, K), dtype=loop.dtype)
            val = val + lm_s.view(B, K, K)  # blank: score 0
            lm_next = lm_nx
    else:
        val, col = ordered_topk(loop.cand_flat, K)
        rank = val
    # a hypothesis that does not expand (removed by the prefix search, not popped): -inf continuations
    val = torch.where(expand, pop.score, loop.neg_inf)[..., None] + val  # [B, K, K]
    if loop.gamma is not None:  # mAES's expansion threshold: near the hypothesis's best continuation only
        val = torch.where(rank >= rank[..., :1] - loop.gamma, val, _NEG_INF)
    val, col = val.view(B, Q), col.view(B, Q)
    tok, j = col % V, col // V
    src = torch.add(loop.q_rank, pop.r0, alpha=K)  # [B, Q]: the parent's slot
    # the parents' fields, each repeated for its K continuations: one expand
    _, p_hash, p_nl, p_last, p_sym = pop.fields[..., None].expand(-1, B, K, K).reshape(-1, B, Q).unbind(0)
    lab = tok != loop.blank
    frame = pop.tmin + j
    sym = torch.where(lab, torch.where(j == 0, p_sym + 1, 1), 0)
    time = frame + ~lab  # a label lands on its frame, the blank after the window
    if loop.max_symbols is not None:
        forced = sym >= loop.max_symbols  # (labels only: a blank has 0)
        time, sym = time + forced, torch.where(forced, 0, sym)
    rows = [time, torch.where(lab, extend_hash(p_hash, tok), p_hash), p_nl + lab, torch.where(lab, tok, p_last), sym,
            src, torch.where(lab, tok, -1), frame]
    if lm_next is not None:  # the row of each arrival's fusion state (a blank keeps its parent's)
        label_row = loop.lm_arrival_row if loop.early else loop.lm_arrival_row + tok
        rows.append(torch.where(lab, label_row, loop.flat_base + src))
    return _WindArrivals(score=val, rows=rows, lm_next=None if lm_next is None else lm_next.reshape(-1, M))


def _merge(loop: BeamLoop, pop: "_WindPop", new: "_WindArrivals") -> None:
    """Step 5: every frame list with its arrivals: merge equal transcripts, keep the ``K`` best.

    The integer fields of the pool (carried slots, then arrivals) travel packed in ``loop.pool [8 (9 with
    fusion), B, P]``: one copy, one stack and one gather instead of one per field (fewer kernels per round);
    equal entries merge by :func:`merge_equal` (all pairs) or, a large pool, :func:`merge_sorted`."""
    B, K, S = loop.B, loop.K, loop.S
    keep = torch.where(pop.go & (loop.slot_list == pop.r0), _NEG_INF, loop.score)  # the popped list is consumed
    pool_score = torch.cat([keep, new.score], dim=1)  # [B, P]
    loop.pool_fields.copy_(loop.fields)
    loop.pool_frame.copy_(loop.time)
    stack_into(loop.pool_new, new.rows)
    if loop.pool_before is not None:
        merged = merge_equal(pool_score, loop.pool_key, loop.pool_key_t, loop.pool_before)
    else:
        merged = merge_sorted(pool_score, loop.pool_hash, loop.pool_time * (loop.V + 1) + loop.pool_last,
                              (loop.pool_nl,))
    bucket = torch.remainder(loop.offset + loop.pool_time if loop.streaming else loop.pool_time, loop.R)  # [B, P]
    by_list = torch.where(bucket[:, None, :] == loop.r_idx, merged[:, None, :], _NEG_INF)  # [B, R, P]
    new_score, sel = ordered_topk(by_list, K)
    new_score, sel = new_score.view(B, S), sel.view(B, S)

    kept = loop.pool.gather(2, sel.expand(loop.pool.shape[0], B, S))  # [8 (9), B, S]
    parent = kept[5]
    tokens = torch.where(new_score > _NEG_INF, kept[6], -1)
    parent_flat = (loop.flat_base + parent).view(B * S)
    loop.pred_state = loop.model.select_state(loop.pred_state, parent_flat)
    loop.dec_proj = loop.dec_proj.index_select(0, parent_flat)
    emitted = tokens >= 0
    loop.emitted = emitted.view(B * S)
    loop.labels = torch.where(emitted, tokens, loop.blank).view(B * S)
    if new.lm_next is not None:  # (with fusion) carried slots' states, then the arrivals' next states
        loop.lm_states = loop.scorer.select(torch.cat([loop.lm_states, new.lm_next]), kept[8].view(B * S))
    # (RNN-T: the tree data is the frame)
    loop._record(tokens, parent, loop.offset + kept[7] if loop.streaming else kept[7])
    loop.score = new_score
    loop.fields.copy_(kept[:5])
    loop._expanding(out=loop.active)


def merge_equal(score: torch.Tensor, key_i: torch.Tensor, key_j: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Merge equal entries of ``score [B, P]`` by one all-pairs comparison ``[B, P, P]`` (small, static):
    entries ``i`` and ``j`` are equal when every key is (``key_i [F, B, P, 1]`` and ``key_j [F, B, 1, P]``:
    views of the keys ``[F, B, P]``); the best entry of a group (the first on exact ties: ``before [P, P]``
    is ``j < i``) gets the log-sum-exp of the group's scores, every other one ``-inf`` (``-inf`` entries add
    nothing; a group of them stays ``-inf``)."""
    eq = (key_i == key_j).all(dim=0)  # [B, P(i), P(j)]
    s_i, s_j = score[:, :, None], score[:, None, :]
    total = torch.logsumexp(torch.where(eq, s_j, _NEG_INF), dim=2)
    beaten = (eq & ((s_j > s_i) | ((s_j == s_i) & before))).any(dim=2)
    return torch.where(beaten, _NEG_INF, total)


def merge_sorted(score: torch.Tensor, key1: torch.Tensor, key2: torch.Tensor,
                 check: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Merge equal entries of ``[B, P]`` candidates (static shapes, O(P log P)): entries are sorted by
    ``(key1, key2)`` (stable, so equal keys keep their order), a group is a run of adjacent live
    entries equal in both keys and in every tensor of ``check``; its best entry (the first one on
    ties) gets the log-sum-exp of the group's scores, every other entry ``-inf``. For pools too large for
    :func:`merge_equal`'s all-pairs comparison (``P > PAIRWISE_MAX``: beams of 16 and more)."""
    B, P = score.shape
    # removed entries sort after the live ones of their key1, so equal live entries are adjacent
    _, order = torch.sort(torch.where(score > _NEG_INF, key2, torch.iinfo(torch.long).max), dim=1, stable=True)
    keys = torch.stack([key1, key2, *check], dim=2).gather(1, order[..., None].expand(B, P, 2 + len(check)))
    _, by1 = torch.sort(keys[..., 0], dim=1, stable=True)
    order = order.gather(1, by1)
    keys = keys.gather(1, by1[..., None].expand_as(keys))
    s = score.gather(1, order)
    live = s > _NEG_INF
    same = live[:, 1:] & live[:, :-1] & (keys[:, 1:] == keys[:, :-1]).all(dim=2)
    start = torch.cat([torch.ones_like(same[:, :1]), ~same], dim=1)
    seg = torch.cumsum(start.long(), dim=1) - 1  # [B, P] group of each sorted entry
    top = torch.full_like(s, _NEG_INF).scatter_reduce(1, seg, s, "amax", include_self=True).gather(1, seg)
    total = torch.zeros_like(s).scatter_add(1, seg, torch.where(live, torch.exp(s - top), 0.0)).gather(1, seg)
    pos = torch.arange(P, device=score.device).expand(B, P)
    first = torch.full_like(seg, P).scatter_reduce(1, seg, torch.where(live & (s == top), pos, P), "amin",
                                                   include_self=True).gather(1, seg)
    merged_sorted = torch.where(live & (pos == first), top + torch.log(total), _NEG_INF)
    return torch.empty_like(merged_sorted).scatter(1, order, merged_sorted)


@dataclass
class _WindPop:
    """The popped frame list of a WIND step: per utterance ``[B, 1]``, per popped hypothesis ``[B, K]``."""

    go: torch.Tensor  # [B, 1] utterances that take a step
    tmin: torch.Tensor  # [B, 1] the earliest frame
    r0: torch.Tensor  # [B, 1] its list in the ring
    slots: torch.Tensor  # [B, K] the list's slots
    score: torch.Tensor  # [B, K]
    fields: torch.Tensor  # [F, B, K]: time, hash, nlabels, last, symbols
    live: torch.Tensor  # [B, K] popped live hypotheses (all on frame tmin)
    flat: torch.Tensor  # [B*K] their rows in the flat hypothesis tensors
    lm_next: torch.Tensor | None  # [B*K, V, M] fusion states after each label (late pruning with fusion)


@dataclass
class _WindWindow:
    """What the window gives the later parts of a step (the candidates are in ``loop.cand``)."""

    cum: torch.Tensor  # [B, K, W] the blank's running sum over the window (with its fusion term)
    last_frame: torch.Tensor  # [B, 1, W] the window's last frame inside the utterance
    ac: torch.Tensor | None  # [B, K, W, V] early pruning: the acoustic scores of the candidates


@dataclass
class _WindArrivals:
    """The ``K * K`` expansions ``[B, Q]`` of a WIND step, to be merged into the frame lists."""

    score: torch.Tensor
    rows: list[torch.Tensor]  # the pool's rows (:data:`_POOL_ROWS`, then the fusion state's row)
    lm_next: torch.Tensor | None  # [X, M] the fusion states the arrivals' rows point into (after lm_states)
