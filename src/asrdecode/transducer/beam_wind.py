"""One WIND beam-search step (RNN-T, method="wind"; Algorithm 3 of the WIND paper), torch engine.

The loop state (:class:`~asrdecode.transducer.beam_loop.BeamLoop`) keeps per-frame hypothesis lists in
a ring of ``window + 1`` lists of ``beam`` slots. A step, for every utterance that takes one: (1) pop the
list of the earliest frame, (2) Equation 1 over the window for its hypotheses, (3) the prefix search,
(4) each expanding hypothesis's ``beam`` best continuations, (5) every list merged with its arrivals and
pruned to ``beam``. The rules are those of
:func:`~asrdecode.transducer.reference_wind_beam.reference_wind_beam_search`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..beam_hyps import extend_hash
from ..selection import ordered_topk
from .model import checked_joint

#: a :class:`~asrdecode.transducer.beam_loop.BeamLoop` (not imported: that module imports this one)
BeamLoop = Any

__all__ = ["wind_step"]

_NEG_INF = float("-inf")


def wind_step(loop: BeamLoop) -> None:
    """One WIND step (module :mod:`~asrdecode.transducer.reference_wind_beam`, steps 1-5) for every
    utterance whose earliest frame list is popped: prefix search, windowed expansions (each
    hypothesis's ``beam`` best), then every frame list merged with its arrivals and pruned to ``beam``."""
    pop = _pop(loop)
    win = _window(loop, pop)
    lm_full, lm_next, expand = _prefix_search(loop, pop, win)
    arrivals = _expansions(loop, pop, win, lm_full, lm_next, expand)
    _merge(loop, pop, arrivals)


def _pop(loop: BeamLoop) -> "_WindPop":
    """Step 1: per utterance, the list of the earliest frame any hypothesis is on, and its hypotheses."""
    B, K, R = loop.B, loop.K, loop.R
    go = loop.active  # [B, 1]
    valid = loop.score > _NEG_INF
    pending = valid & (loop.time < loop.lengths)
    big = torch.iinfo(torch.long).max
    tmin = torch.where(pending, loop.time, big).min(dim=1, keepdim=True).values
    tmin = torch.where(go, tmin, 0)  # [B, 1]
    r0 = torch.remainder(loop.offset + tmin, R)  # the popped list
    pslots = r0 * K + loop.k_idx  # [B, K]
    p_score = loop.score.gather(1, pslots)
    p_flat = (loop.flat_base + pslots).view(B * K)
    # the integer fields in one gather: (time), hash, nlabels, last, symbols
    F = loop.fields.shape[0]
    _, p_hash, p_nl, p_last, p_sym = loop.fields.gather(2, pslots[None].expand(F, B, K)).unbind(0)
    return _WindPop(go=go, tmin=tmin, r0=r0, slots=pslots, score=p_score, sym=p_sym, hash=p_hash,
                    nlabels=p_nl, last=p_last, live=go & (p_score > _NEG_INF), flat=p_flat,
                    lm=loop.scorer.select(loop.lm_states, p_flat))


def _window(loop: BeamLoop, pop: "_WindPop") -> "_WindWindow":
    """Step 2: Equation 1 over the window for the popped hypotheses (fusion added later)."""
    B, K, V, W = loop.B, loop.K, loop.V, loop.window
    blank, dev = loop.blank, loop.score.device
    frames = pop.tmin + loop.win  # [B, W]
    fvalid = (frames < loop.lengths)[:, None, :]  # [B, 1, W]
    enc = loop.enc_proj[loop.b_idx, frames.clamp(max=max(loop.T - 1, 0))]  # [B, W, H]
    dec = loop.dec_proj[pop.flat].view(B, K, 1, -1)
    enc = enc[:, None].expand(B, K, W, enc.shape[-1])
    lp = torch.log_softmax(checked_joint(loop.model, enc, dec).to(loop.dtype), dim=-1)  # [B, K, W, V]
    lpb = lp[..., blank]  # [B, K, W]
    blank_fr = torch.where(fvalid, (1.0 + loop.lam) * lpb if loop.lm_weighted else lpb, 0.0)
    blank_ac = torch.where(fvalid, lpb, 0.0)
    nonblank = loop.lam * torch.log1p(-torch.exp(lpb)) if loop.lm_weighted else torch.zeros_like(lpb)
    label_base = torch.cumsum(blank_fr, dim=-1) - blank_fr + nonblank + loop.beta  # [B, K, W]
    whole = blank_fr.sum(dim=-1)  # [B, K]: blank over the whole window
    n = fvalid.sum(dim=-1, keepdim=True)  # [B, 1, 1]
    last_frame = loop.win == n - 1  # [B, 1, W]
    is_blank = torch.arange(V, device=dev) == blank
    # candidate columns j * V + v: label v first on window frame j; (n - 1) * V + blank: blank on all
    blank_col = torch.where(last_frame, whole[..., None], _NEG_INF)[..., None]  # [B, K, W, 1]
    no_lm = torch.where(is_blank, blank_col, torch.where(fvalid[..., None], label_base[..., None] + lp, _NEG_INF))
    return _WindWindow(lp=lp, fvalid=fvalid, blank_ac=blank_ac, last_frame=last_frame, is_blank=is_blank,
                       no_lm=no_lm)


def _prefix_search(loop: BeamLoop, pop: "_WindPop", win: "_WindWindow") -> tuple[Any, Any, torch.Tensor]:
    """Step 3: ``B = A + (v,)`` on this frame gets A's paths "then v here" and A is removed (A's
    score updated in ``pop.score``). Returns late pruning's fusion rows and which hypotheses expand."""
    B, K, V = loop.B, loop.K, loop.V
    pair = (pop.live[:, :, None] & pop.live[:, None, :] & (pop.nlabels[:, :, None] == pop.nlabels[:, None, :] + 1)
            & (pop.hash[:, :, None] == extend_hash(pop.hash[:, None, :], pop.last[:, :, None])))  # [B, K(b), K(a)]
    if loop.max_symbols is not None:
        pair = pair & (pop.sym[:, None, :] + 1 < loop.max_symbols)
    last_bk = pop.last[:, :, None].expand(B, K, K)  # token v of pair (b, a)
    if loop.early:
        lm_v, _ = loop.scorer.score_tokens(pop.lm, last_bk.transpose(1, 2).reshape(B * K, K), dtype=loop.dtype)
        lm_v = lm_v.view(B, K, K).transpose(1, 2)  # [B, K(b), K(a)]
        lm_full = lm_next = None
    else:
        lm_full, lm_next = loop.scorer.advance(pop.lm, dtype=loop.dtype)  # [B*K, V], [B*K, V, M]
        lm_full = lm_full.view(B, K, V)
        lm_v = lm_full[:, None].expand(B, K, K, V).gather(3, last_bk[..., None])[..., 0]
    first = win.no_lm[:, :, 0, :]  # [B, K(a), V]: the window's first frame
    complete = pop.score[:, None, :] + first[:, None].expand(B, K, K, V).gather(3, last_bk[..., None])[..., 0] + lm_v
    pop.score = torch.logsumexp(torch.cat([pop.score[..., None], torch.where(pair, complete, _NEG_INF)], dim=2),
                                dim=2)
    return lm_full, lm_next, pop.live & ~pair.any(dim=1)


def _expansions(loop: BeamLoop, pop: "_WindPop", win: "_WindWindow", lm_full: Any, lm_next: Any,
                     expand: torch.Tensor) -> "_WindArrivals":
    """Step 4: each expanding hypothesis's ``K`` best (label, frame) or whole-window blank continuations."""
    B, K, V, W = loop.B, loop.K, loop.V, loop.window
    M = loop.lm_states.shape[-1]
    C = W * V
    if loop.early:
        ac = torch.where(win.fvalid[..., None], (torch.cumsum(win.blank_ac, -1) - win.blank_ac)[..., None] + win.lp,
                         _NEG_INF)
        ac = torch.where(win.is_blank, torch.where(win.last_frame, win.blank_ac.sum(-1)[..., None],
                                                   _NEG_INF)[..., None], ac)
        rank, col = ordered_topk(ac.reshape(B, K, C), K)  # [B, K, K]
        val = win.no_lm.reshape(B, K, C).gather(2, col)
        tok = col % V
        lm_s, lm_nx = loop.scorer.score_tokens(pop.lm, tok.view(B * K, K), dtype=loop.dtype)
        val = val + lm_s.view(B, K, K)  # blank: score 0
        new_lm = lm_nx.view(B, K * K, M)
    else:
        fused = win.no_lm + torch.where(win.is_blank, 0.0, lm_full)[:, :, None, :]
        val, col = ordered_topk(fused.reshape(B, K, C), K)
        rank = val
        tok = col % V
        new_lm = loop.scorer.gather(lm_next.view(B * K, V, M), tok.view(B * K, K)).view(B, K * K, M)
    j = col // V
    Q = K * K
    keep = expand[..., None]
    if loop.gamma is not None:  # mAES's expansion threshold: near the hypothesis's best continuation only
        keep = keep & (rank >= rank[..., :1] - loop.gamma)
    val = torch.where(keep, pop.score[..., None] + val, _NEG_INF).view(B, Q)
    tok, j = tok.view(B, Q), j.view(B, Q)
    src = pop.slots[:, :, None].expand(B, K, K).reshape(B, Q)  # the parent's slot
    rep = lambda x: x[:, :, None].expand(B, K, K).reshape(B, Q)  # noqa: E731
    lab = tok != loop.blank
    sym = torch.where(lab, torch.where(j == 0, rep(pop.sym) + 1, 1), 0)
    time = pop.tmin + j + (~lab).long()  # a label lands on its frame, the blank after the window
    if loop.max_symbols is not None:
        forced = lab & (sym >= loop.max_symbols)
        time, sym = time + forced.long(), torch.where(forced, 0, sym)
    new_lm = loop.scorer.where(lab, new_lm,
                               loop.scorer.select(loop.lm_states, (loop.flat_base + src).view(-1)).view(B, Q, M))
    return _WindArrivals(score=val, time=time, sym=sym, hash=torch.where(lab, extend_hash(rep(pop.hash), tok),
                                                                         rep(pop.hash)),
                         nlabels=rep(pop.nlabels) + lab.long(), last=torch.where(lab, tok, rep(pop.last)),
                         src=src, tok=torch.where(lab, tok, -1), frame=pop.tmin + j, lm=new_lm)


def _merge(loop: BeamLoop, pop: "_WindPop", new: "_WindArrivals") -> None:
    """Step 5: every frame list with its arrivals: merge equal transcripts, keep the ``K`` best.

    The integer fields of the pool (carried slots, then arrivals) travel packed in one ``[8, B, P]`` tensor:
    one concatenation and one gather each instead of one per field (fewer kernels per round)."""
    B, K, V, S = loop.B, loop.K, loop.V, loop.S
    M = loop.lm_states.shape[-1]
    keep = torch.where(pop.go & (loop.slot_list == pop.r0), _NEG_INF, loop.score)  # the popped list is consumed
    pool_score = torch.cat([keep, new.score], dim=1)  # [B, P]
    # fields: time, hash, nlabels, last, symbols (the loop's), parent slot, token (-1: none), frame of the token
    carried = torch.cat([loop.fields, torch.stack([loop.slot_idx.expand(B, S), loop.minus_one.expand(B, S),
                                                   loop.time])])
    arrivals = torch.stack([new.time, new.hash, new.nlabels, new.last, new.sym, new.src, new.tok, new.frame])
    pool = torch.cat([carried, arrivals], dim=2)  # [8, B, P]
    pool_time, pool_hash, pool_nl, pool_last = pool[:4].unbind(0)
    pool_lm = torch.cat([loop.lm_states.view(B, S, M), new.lm], dim=1)
    merged = _merge_equal(pool_score, pool_hash, pool_time * (V + 1) + pool_last, (pool_nl,))
    bucket = torch.remainder(loop.offset + pool_time, loop.R)  # [B, P]
    by_list = torch.where(bucket[:, None, :] == loop.r_idx, merged[:, None, :], _NEG_INF)  # [B, R, P]
    new_score, sel = ordered_topk(by_list, K)
    new_score, sel = new_score.view(B, S), sel.view(B, S)
    live = new_score > _NEG_INF

    kept = pool.gather(2, sel[None].expand(pool.shape[0], B, S))  # [8, B, S]
    parent = kept[5]
    tokens = torch.where(live, kept[6], -1)
    parent_flat = (loop.flat_base + parent).view(B * S)
    loop.pred_state = loop.model.select_state(loop.pred_state, parent_flat)
    loop.dec_proj = loop.dec_proj[parent_flat]
    loop.emitted = (tokens >= 0).view(B * S)
    loop.labels = torch.where(tokens >= 0, tokens, loop.blank).view(B * S)
    loop.lm_states = loop.scorer.gather(pool_lm, sel).reshape(B * S, M)
    loop._record(tokens, parent, loop.offset + kept[7])  # (RNN-T: the tree data is the frame)
    loop.score = new_score
    loop.fields.copy_(kept[:5])
    loop._expanding(out=loop.active)


@dataclass
class _WindPop:
    """The popped frame list of a WIND step: per utterance ``[B, 1]``, per popped hypothesis ``[B, K]``."""

    go: torch.Tensor  # [B, 1] utterances that take a step
    tmin: torch.Tensor  # [B, 1] the earliest frame
    r0: torch.Tensor  # [B, 1] its list in the ring
    slots: torch.Tensor  # [B, K] the list's slots
    score: torch.Tensor
    sym: torch.Tensor
    hash: torch.Tensor
    nlabels: torch.Tensor
    last: torch.Tensor
    live: torch.Tensor  # [B, K] popped live hypotheses (all on frame tmin)
    flat: torch.Tensor  # [B*K] their rows in the flat hypothesis tensors
    lm: torch.Tensor  # [B*K, M] their fusion states


@dataclass
class _WindWindow:
    """Equation 1 over a window for the popped hypotheses."""

    lp: torch.Tensor  # [B, K, W, V] joint log-probs
    fvalid: torch.Tensor  # [B, 1, W] window frames inside the utterance
    blank_ac: torch.Tensor  # [B, K, W] blank log-probs (acoustic only)
    last_frame: torch.Tensor  # [B, 1, W] the window's last valid frame
    is_blank: torch.Tensor  # [V]
    no_lm: torch.Tensor  # [B, K, W, V] candidate scores before fusion


@dataclass
class _WindArrivals:
    """The ``K * K`` expansions ``[B, Q]`` of a WIND step, to be merged into the frame lists."""

    score: torch.Tensor
    time: torch.Tensor
    sym: torch.Tensor
    hash: torch.Tensor
    nlabels: torch.Tensor
    last: torch.Tensor
    src: torch.Tensor  # parent slot
    tok: torch.Tensor  # label or -1 (blank)
    frame: torch.Tensor  # the frame the label is on
    lm: torch.Tensor  # [B, Q, M]


def _merge_equal(score: torch.Tensor, key1: torch.Tensor, key2: torch.Tensor,
                 check: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Merge equal entries of ``[B, P]`` candidates (static shapes, O(P log P)): entries are sorted by
    ``(key1, key2)`` (stable, so equal keys keep their order), a group is a run of adjacent live
    entries equal in both keys and in every tensor of ``check``; its best entry (the first one on
    ties) gets the log-sum-exp of the group's scores, every other entry ``-inf``."""
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
