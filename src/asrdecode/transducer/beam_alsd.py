"""One ALSD++ / AES++ step of the batched transducer beam search (the torch engine).

The step is a sync-free function of the loop state (:class:`~asrdecode.transducer.beam_loop.BeamLoop`):
one joint call for every hypothesis at its frame, fusion (late or early pruning, Eq. 2 / Eq. 3 blank
scoring), the ``K`` best of the candidates and the carried hypotheses, time advance, merging of equal
transcripts, state moves and tree records. The rules are those of
:func:`~asrdecode.transducer.reference_beam.reference_beam_search`.

A round is a GPU's kernel launches, so the step keeps its op count low: the candidates of a hypothesis and
its carry are written into one preallocated ``[B, K, W + 1]`` buffer (:func:`alsd_buffers`) and selected by
one ordered top-k; what a selected column means (label / blank / carry) is read from per-column tables;
the parents' integer fields are one gather of the packed ``fields [F, B, K]``, the new ones one stack
written in place; the merge reads the top-k order (its scores are sorted, ties by slot), so "a better
equal hypothesis" is "an equal one in an earlier slot"; the state tensors are written in place (``out=``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..beam_hyps import extend_hash
from ..selection import ordered_topk
from ..fusion import weigh
from .blank_scoring import log_nonblank
from .model import checked_joint

#: a :class:`~asrdecode.transducer.beam_loop.BeamLoop` (not imported: that module imports this one)
BeamLoop = Any

__all__ = ["alsd_step", "alsd_buffers", "add_into", "where_into", "stack_into"]

_NEG_INF = float("-inf")


def alsd_buffers(loop: BeamLoop) -> None:
    """The step's preallocated candidate buffer and per-column tables (set on ``loop`` once per call).

    ``cand [B, K, W + 1]``: each hypothesis's ``W`` candidates (late pruning: ``V * D`` columns
    ``token * D + d``; early: its ``K`` best) and, last, its carried score; ``emit_col`` / ``blank_col``
    ``[W + 1]`` (late pruning): whether a column emits a label / is the blank.
    """
    B, K, V, D = loop.B, loop.K, loop.V, loop.D
    W = K if loop.early else V * D
    dev = loop.score.device
    loop.cand_width = W + 1
    loop.cand = torch.empty((B, K, W + 1), dtype=loop.dtype, device=dev)
    loop.cand_main = loop.cand[..., :W]  # views made once: no op per step
    loop.cand_carry = loop.cand[..., W]
    loop.cand_flat = loop.cand.view(B, K * (W + 1))
    # views of state tensors the torch step writes in place (never replaced): made once
    loop.score_col, loop.active_col = loop.score[..., None], loop.active[..., None]  # [B, K, 1]
    loop.emitted_bk, loop.labels_bk = loop.emitted.view(B, K), loop.labels.view(B, K)
    col = torch.arange(W + 1, device=dev)
    tok = col // D
    real = col < W
    loop.emit_col = real & (tok != loop.blank)
    loop.blank_col = real & (tok == loop.blank)
    # without fusion: the length reward of each token (beta on labels, 0 on the blank)
    loop.label_bias = torch.where(torch.arange(V, device=dev) == loop.blank, 0.0,
                                  torch.tensor(loop.beta, dtype=loop.dtype, device=dev))


def alsd_step(loop: BeamLoop) -> None:
    """One ALSD++ / AES++ step of ``loop`` (torch engine): expand the active hypotheses at their frames,
    keep the ``K`` best candidates (carried ones included), advance time by the duration rule, merge equal
    transcripts on the same frame, move the prediction-network and fusion states to their hypotheses and
    record the tree; :meth:`BeamLoop.predict_step` then runs the network on the emitting rows."""
    B, K, V, D = loop.B, loop.K, loop.V, loop.D
    N = B * K
    sel_val, sel_idx, lm_next, top_c = _select(loop)
    loop._sel_val = sel_val  # (tests read the selections' scores: :attr:`BeamLoop._selected_ok`)
    parent = sel_idx // loop.cand_width
    col = sel_idx % loop.cand_width  # [B, K]: the candidate column; cand_width - 1 is the carry
    emitted = loop.emitted_bk
    if top_c is None:  # late pruning: the column is token * D + d
        torch.take(loop.emit_col, col, out=emitted)
        blanked = torch.take(loop.blank_col, col)
        c = col if not loop.tdt else col.clamp(max=V * D - 1)
    else:  # early pruning: the column is a rank among the hypothesis's K best
        c = top_c.view(B, K * K).gather(1, parent * K + col.clamp(max=K - 1))
        real = col != K
        is_blank = c // D == loop.blank
        torch.logical_and(real, ~is_blank, out=emitted)
        blanked = real & is_blank
    tok = c // D if loop.tdt else c  # (a carry's "token" is never read: it neither emits nor blanks)

    # the parents' integer fields in one gather: time, hash, nlabels, last, symbols
    F = loop.fields.shape[0]
    p_time, p_hash, p_nl, p_last, p_sym = loop.fields.gather(2, parent.expand(F, B, K)).unbind(0)
    label_adv: torch.Tensor | int = 0
    if loop.tdt:
        time, symbols, label_adv = _advance_tdt(loop, c, emitted, blanked, p_time, p_sym)
    else:  # a label stays on its frame, a blank moves one frame on; the cap forces one more frame
        symbols = p_sym + emitted
        adv = blanked
        if loop.max_symbols is not None:  # only a label reaches the cap (symbols stay below it)
            adv = adv | (symbols >= loop.max_symbols)
        time = torch.minimum(p_time + adv, loop.time_cap)
        symbols = torch.where(adv, 0, symbols)
    hsh = torch.where(emitted, extend_hash(p_hash, tok), p_hash)
    torch.stack([time, hsh, p_nl + emitted, torch.where(emitted, tok, p_last), symbols], out=loop.fields)

    # merge equal transcripts on the same frame (equal time, hash, nlabels, last): the first of a group in
    # the top-k order (the best; ties by slot) keeps the log-sum-exp of the group
    key = loop.merge_key
    eq = (key[..., :, None] == key[..., None, :]).all(dim=0)  # [B, K, K]
    group = torch.logsumexp(torch.where(eq, sel_val[:, None, :], _NEG_INF), dim=2)
    torch.where((eq & loop.tri).any(dim=2), loop.neg_inf, group, out=loop.score)

    # prediction-network states follow their hypotheses; :meth:`predict_step` advances them
    parent_flat = (loop.flat_base + parent).view(N)
    loop.pred_state = loop.model.select_state(loop.pred_state, parent_flat)
    loop.dec_proj = loop.dec_proj.index_select(0, parent_flat)
    torch.where(emitted, tok, loop.blank_t, out=loop.labels_bk)
    _move_fusion_states(loop, parent_flat, lm_next, top_c is None, col)

    data = loop.offset + p_time
    loop._record(torch.where(emitted, tok, -1), parent, loop.rule.pack_data(data, label_adv) if loop.tdt else data)
    loop._expanding(out=loop.active)


def _advance_tdt(loop: BeamLoop, c: torch.Tensor, emitted: torch.Tensor, blanked: torch.Tensor,
                 p_time: torch.Tensor, p_sym: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TDT time advance: the new times and symbol counts ``[B, K]`` and the labels' durations."""
    dur = loop.dvals[c % loop.D]  # [B, K] duration value
    label_adv = loop.rule.label_advance(dur)
    blank_adv = loop.rule.blank_advance(dur)
    # labels on the frame a label lands on: +1 on the same frame; a TDT label leaves its frame
    symbols = torch.where(emitted, torch.where(label_adv == 0, p_sym + 1, 0), torch.where(blanked, 0, p_sym))
    adv = torch.where(emitted, label_adv, torch.where(blanked, blank_adv, 0))
    if loop.max_symbols is not None:
        forced = emitted & (label_adv == 0) & (symbols >= loop.max_symbols)
        adv = adv + forced.long()
        symbols = torch.where(forced, 0, symbols)
    return torch.minimum(p_time + adv, loop.time_cap), symbols, label_adv


def _move_fusion_states(loop: BeamLoop, parent_flat: torch.Tensor, lm_next: torch.Tensor | None, late: bool,
                        col: torch.Tensor) -> None:
    """The fusion states of the new hypotheses: the parent's, advanced by the emitted label."""
    if lm_next is None:  # no fusion: states [N, 0]
        return
    sc = loop.scorer
    N = parent_flat.shape[0]
    if late and loop.lm_blank_identity:  # every model keeps its state on the blank: one gather at the label
        M = lm_next.shape[-1]
        rows = torch.add(loop.labels, parent_flat, alpha=loop.V)
        torch.index_select(lm_next.view(N * loop.V, M), 0, rows, out=loop.lm_states)
        return
    lm_prev = sc.select(loop.lm_states, parent_flat)
    if late:
        nxt = sc.select(lm_next, (parent_flat, loop.labels))
    else:
        nxt = sc.select(lm_next.view(N * loop.K, -1), parent_flat * loop.K + col.view(N).clamp(max=loop.K - 1))
    loop.lm_states = sc.where(loop.emitted, nxt, lm_prev)


def _select(loop: BeamLoop) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """ALSD / AES candidates at each hypothesis's frame, fused, and the top ``K`` (carried ones included).

    Returns the selected scores ``[B, K]`` (best first, equal ones by index) and their indices into
    ``loop.cand_flat``, the fusion states after each token (late: ``[N, V, M]``, early: ``[N, K, M]``; None
    without fusion) and, early pruning, each hypothesis's ``K`` best candidates ``[B, K, K]`` (late: None).
    """
    B, K, V, D = loop.B, loop.K, loop.V, loop.D
    N = B * K
    expand = loop.active
    frames = loop.time.clamp(max=loop.enc_proj.shape[1] - 1)  # (the shape, not loop.T: a compiled round
    # keeps T symbolic, one graph for every length bucket; a loop with no frame runs no step)
    logits = checked_joint(loop.model, loop.enc_proj[loop.b_idx, frames], loop.dec_proj.view(B, K, -1))
    if logits.dtype != loop.dtype:
        logits = logits.to(loop.dtype)
    lp_tok = torch.log_softmax(logits[..., :V] if loop.tdt else logits, dim=-1)  # [B, K, V]
    if loop.tdt:
        lp_dur = torch.log_softmax(logits[..., V:], dim=-1)  # [B, K, D]
        acoustic = (lp_tok[..., :, None] + lp_dur[..., None, :]).view(B, K, V * D)
    else:
        acoustic = lp_tok
    # fusion terms: blank_add for the blank, label_add (+ the LM score) for labels
    lp_blank = lp_tok[..., loop.blank : loop.blank + 1]  # [B, K, 1]
    blank_add: torch.Tensor | float = 0.0
    label_add: torch.Tensor | float = 0.0
    if loop.lm_weighted:  # (weigh: a masked class's -inf stays -inf at lam <= 0, never NaN or +inf)
        blank_add = weigh(lp_blank, loop.lam)
        label_add = weigh(log_nonblank(lp_tok, loop.blank), loop.lam)
    if loop.beta:
        label_add = label_add + loop.beta
    base = torch.where(loop.active_col, loop.score_col, loop.neg_inf)  # [B, K, 1]: expanding ones', else -inf
    where_into(loop.cand_carry, expand, loop.neg_inf, loop.score)  # waiting / finished ones stay

    if not loop.early:
        lm_next = None
        add: torch.Tensor | None = None  # [B, K, V] or [V]: what each token adds to the acoustic score
        if loop.fused:
            lm, lm_next = loop.scorer.advance(loop.lm_states, dtype=loop.dtype)  # [N, V], [N, V, M]
            add = lm.view(B, K, V)
            if isinstance(label_add, torch.Tensor) or label_add != 0.0:
                add = add + label_add
            blank_col = add[..., loop.blank : loop.blank + 1]  # the blank: blank_add, not the LM's (0) + label_add
            if isinstance(blank_add, torch.Tensor):
                blank_col.copy_(blank_add)
            else:
                blank_col.fill_(blank_add)
        elif loop.beta:  # no fusion (so no LM-weighted blank): beta on the labels, 0 on the blank
            add = loop.label_bias
        if add is None:
            fused = acoustic
        elif loop.tdt:
            fused = (acoustic.view(B, K, V, D) + add[..., None]).view(B, K, V * D)
        else:
            fused = acoustic + add
        add_into(loop.cand_main, base, fused)
        sel_val, sel_idx = ordered_topk(loop.cand_flat, K)
        return sel_val, sel_idx, lm_next, None

    top_ac, top_c = ordered_topk(acoustic, K)  # per hypothesis, acoustic only: [B, K, K]
    top_tok = top_c // D if loop.tdt else top_c
    if loop.fused:
        lm_sel, lm_next = loop.scorer.score_tokens(loop.lm_states, top_tok.view(N, K), dtype=loop.dtype)
        lm_sel = lm_sel.view(B, K, K)
    else:
        lm_sel, lm_next = torch.zeros_like(top_ac), None
    is_blank = top_tok == loop.blank
    add_e = torch.where(is_blank, blank_add, lm_sel + label_add)
    add_into(loop.cand_main, base + top_ac, add_e)
    sel_val, sel_idx = ordered_topk(loop.cand_flat, K)
    return sel_val, sel_idx, lm_next, top_c


def where_into(dst: torch.Tensor, cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``dst[...] = torch.where(cond, a, b)`` for a strided view ``dst`` (as :func:`add_into`)."""
    if torch.compiler.is_compiling():
        dst.copy_(torch.where(cond, a, b))
    else:
        torch.where(cond, a, b, out=dst)


def stack_into(dst: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """``dst[...] = torch.stack(tensors)`` for a strided view ``dst`` (as :func:`add_into`)."""
    if torch.compiler.is_compiling():
        dst.copy_(torch.stack(list(tensors)))
    else:
        torch.stack(list(tensors), out=dst)


def add_into(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``dst[...] = a + b`` for a strided view ``dst`` (a part of the candidate buffer): ``out=`` eagerly (no
    temporary, no extra op), a copy under torch.compile (Dynamo breaks the graph at a non-contiguous ``out=``;
    Inductor fuses the copy)."""
    if torch.compiler.is_compiling():
        dst.copy_(a + b)
    else:
        torch.add(a, b, out=dst)
