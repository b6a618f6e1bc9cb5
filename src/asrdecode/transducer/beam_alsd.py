"""One ALSD++ / AES++ step of the batched transducer beam search (the torch engine).

The step is a sync-free function of the loop state (:class:`~asrdecode.transducer.beam_loop._BeamLoop`):
one joint call for every hypothesis at its frame, fusion (late or early pruning, Eq. 2 / Eq. 3 blank
scoring), the ``K`` best of the candidates and the carried hypotheses, time advance, merging of equal
transcripts, state moves and tree records. The rules are those of
:func:`~asrdecode.transducer.reference_beam.reference_beam_search`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..beam_hyps import extend_hash
from ..selection import ordered_topk
from .model import checked_joint

#: a :class:`~asrdecode.transducer.beam_loop._BeamLoop` (not imported: that module imports this one)
_BeamLoop = Any

__all__ = ["alsd_step"]

_NEG_INF = float("-inf")


def alsd_step(loop: _BeamLoop) -> None:
    """One ALSD++ / AES++ step of ``loop`` (torch engine): expand the active hypotheses at their frames,
    keep the ``K`` best candidates (carried ones included), advance time by the duration rule, merge equal
    transcripts on the same frame, move the prediction-network and fusion states to their hypotheses and
    record the tree; :meth:`_BeamLoop.predict_step` then runs the network on the emitting rows."""
    B, K, D = loop.B, loop.K, loop.D
    N = B * K
    expand = loop.active
    carry = torch.where(expand, _NEG_INF, loop.score)[..., None]  # [B, K, 1]: waiting / finished stay
    sel_val, parent, c, is_carry, colc, lm_next = _select(loop, expand, carry)
    tok = c // D
    dur = loop.dvals[c % D]  # [B, K] duration value (0 for RNN-T)
    ok = sel_val > _NEG_INF
    emitted = ok & ~is_carry & (tok != loop.blank)
    blanked = ok & ~is_carry & (tok == loop.blank)
    # the parents' integer fields in one gather: time, symbols, hash, nlabels, last
    fields = torch.stack([loop.time, loop.symbols, loop.hash, loop.nlabels, loop.last], dim=2)
    p_time, p_sym, p_hash, p_nl, p_last = fields.gather(1, parent[..., None].expand(B, K, 5)).unbind(2)
    label_adv = loop.rule.label_advance(dur)
    blank_adv = loop.rule.blank_advance(dur)
    # labels on the frame a label lands on: +1 on the same frame; a TDT label leaves its frame
    symbols = torch.where(emitted, torch.where(label_adv == 0, p_sym + 1, 0), torch.where(blanked, 0, p_sym))
    adv = torch.where(emitted, label_adv, torch.where(blanked, blank_adv, 0))
    if loop.max_symbols is not None:
        forced = emitted & (label_adv == 0) & (symbols >= loop.max_symbols)
        adv = adv + forced.long()
        symbols = torch.where(forced, 0, symbols)
    time = p_time + adv
    # a TDT jump past the end stops at the end; before the last chunk it is kept (next chunk)
    time = torch.where(loop.final, torch.minimum(time, loop.lengths), time)
    hsh = torch.where(emitted, extend_hash(p_hash, tok), p_hash)
    nlabels = p_nl + emitted.long()
    last = torch.where(emitted, tok, p_last)

    # merge equal transcripts on the same frame: best one keeps the log-sum-exp of the group
    key = torch.stack([hsh, time, nlabels, last], dim=2)  # [B, K, 4]: equal in all four
    eq = (key[:, :, None] == key[:, None, :]).all(dim=3) & ok[:, :, None] & ok[:, None, :]  # [B, K, K]
    s_i, s_j = sel_val[:, :, None], sel_val[:, None, :]
    idx = torch.arange(K, device=eq.device)
    better = eq & ((s_j > s_i) | ((s_j == s_i) & (idx[None, None, :] < idx[None, :, None])))
    leader = ok & ~better.any(dim=2)
    group = torch.logsumexp(torch.where(eq, s_j, _NEG_INF), dim=2)
    loop.score = torch.where(leader, group, _NEG_INF)
    loop._selected_ok = ok  # selected before merging (tests check the merges)

    # prediction-network states follow their hypotheses; :meth:`predict_step` advances them
    parent_flat = (loop.flat_base + parent).view(N)
    em_flat = emitted.view(N)
    loop.pred_state = loop.model.select_state(loop.pred_state, parent_flat)
    loop.dec_proj = loop.dec_proj[parent_flat]
    loop.emitted, loop.labels = em_flat, torch.where(emitted, tok, loop.blank).view(N)
    # fusion states
    sc = loop.scorer
    lm_prev = sc.select(loop.lm_states, parent_flat)
    if lm_next is not None:
        if loop.early:
            nxt = sc.select(lm_next.view(N * K, -1), parent_flat * K + colc.view(N))
        else:
            nxt = sc.select(lm_next, (parent_flat, tok.view(N)))
        loop.lm_states = sc.where(em_flat, nxt, lm_prev)
    else:
        loop.lm_states = lm_prev

    loop._record(torch.where(emitted, tok, -1), parent, loop.rule.pack_data(loop.offset + p_time, label_adv))
    loop.time, loop.symbols, loop.hash, loop.nlabels, loop.last = time, symbols, hsh, nlabels, last
    loop.active = loop._expanding()


def _select(
    loop: _BeamLoop, expand: torch.Tensor, carry: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """ALSD / AES candidates at each hypothesis's frame, fused, and the top ``K``.

    Returns the selected scores ``[B, K]``, parent slots, candidate indices (``token * D + d``),
    carry flags, candidate columns (early pruning) and the fusion states after each token.
    """
    B, K, V, D = loop.B, loop.K, loop.V, loop.D
    N = B * K
    C = V * D
    frames = loop.time.clamp(max=max(loop.T - 1, 0))
    logits = checked_joint(loop.model, loop.enc_proj[loop.b_idx, frames], loop.dec_proj.view(B, K, -1))
    logits = logits.to(loop.dtype)
    lp_tok = torch.log_softmax(logits[..., :V], dim=-1)  # [B, K, V]
    if loop.tdt:
        lp_dur = torch.log_softmax(logits[..., V:], dim=-1)  # [B, K, D]
        acoustic = lp_tok[..., :, None] + lp_dur[..., None, :]  # [B, K, V, D]
    else:
        acoustic = lp_tok[..., :, None]
    # fusion terms per token: blank_add for the blank, label_add[k] for labels
    lp_blank = lp_tok[..., loop.blank]  # [B, K]
    blank_add = loop.lam * lp_blank if loop.lm_weighted else torch.zeros_like(lp_blank)
    nonblank_add = (loop.lam * torch.log1p(-torch.exp(lp_blank))) if loop.lm_weighted else torch.zeros_like(lp_blank)
    if loop.beta:
        nonblank_add = nonblank_add + loop.beta
    tok_ids = torch.arange(V, device=lp_tok.device)
    is_blank_tok = tok_ids == loop.blank  # [V]
    acoustic = acoustic.reshape(B, K, C)
    exp_mask = expand[..., None]

    if not loop.early:
        if loop.fused:
            lm, lm_next = loop.scorer.advance(loop.lm_states, dtype=loop.dtype)  # [N, V], [N, V, M]
            lm = lm.view(B, K, V)
        else:
            lm, lm_next = torch.zeros_like(lp_tok), None
        add = torch.where(is_blank_tok, blank_add[..., None], lm + nonblank_add[..., None])  # [B, K, V]
        fused = acoustic.view(B, K, V, D) + add[..., None]
        cand = torch.where(exp_mask, loop.score[..., None] + fused.reshape(B, K, C), _NEG_INF)
        sel_val, parent, col, is_carry = _top_k_with_carry(cand, carry)
        c = colc = col.clamp(max=C - 1)
    else:
        top_ac, top_c = ordered_topk(acoustic, K)  # per hypothesis, acoustic only: [B, K, K]
        top_tok = top_c // D
        if loop.fused:
            lm_sel, lm_next = loop.scorer.score_tokens(loop.lm_states, top_tok.view(N, K), dtype=loop.dtype)
            lm_sel = lm_sel.view(B, K, K)
        else:
            lm_sel, lm_next = torch.zeros_like(top_ac), None
        add = torch.where(top_tok == loop.blank, blank_add[..., None], lm_sel + nonblank_add[..., None])
        cand = torch.where(exp_mask, loop.score[..., None] + top_ac + add, _NEG_INF)
        sel_val, parent, col, is_carry = _top_k_with_carry(cand, carry)
        colc = col.clamp(max=K - 1)
        c = top_c.view(B, K * K).gather(1, parent * K + colc)

    return sel_val, parent, c, is_carry, colc, lm_next


def _top_k_with_carry(
    cand: torch.Tensor, carry: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``K`` best of candidates ``[B, K, W]`` plus each hypothesis' carried score ``[B, K, 1]``; equal
    scores in the order of the candidate index ``k * (W + 1) + column`` (the native engine's rule).

    Returns (scores, parent slot, column in ``0..W`` — ``W`` is the carry, is-carry), each ``[B, K]``.
    """
    B, K, W = cand.shape
    width = W + 1
    sel_val, sel_idx = ordered_topk(torch.cat([cand, carry], dim=2).view(B, K * width), K)
    col = sel_idx % width
    return sel_val, sel_idx // width, col, col == W
