"""One frame of the batched CTC prefix beam search (the tensor engine), sync-free and static-shape.

All hypotheses of all utterances live in ``[B, K]`` tensors (``K = beam``, a
:class:`~asrdecode.ctc.beam.CTCBeamState`). One frame:

1. every hypothesis ``c`` *stays* (``p_b' = p_tot(c) + y[blank]``, ``p_nb' = p_nb(c) + y[last(c)]``)
   and is *extended* by every non-blank token ``k`` (``p_nb'(c+k) = p(c) + y[k]`` with
   ``p = p_b`` when ``k == last(c)``, else ``p_tot``), the extension's fusion score being
   ``fusion(c) + sum_i w_i * score_i(state_i(c), k)`` (late fusion: the full vocabulary is scored
   before pruning);
2. an extension ``c+k`` that is already in the beam (found in O(K^2) by comparing each
   hypothesis's parent hash with the others' hashes) is merged into that hypothesis's stay
   candidate and removed;
3. the ``K`` best candidates by ``score = logaddexp(p_b, p_nb) + fusion + beta * length`` are kept,
   and of those, the ones more than ``beam_threshold`` below the best are dropped (score ``-inf``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..beam_hyps import extend_hash
from ..fusion import FusionScorer

__all__ = ["_Stepper"]

#: a :class:`~asrdecode.ctc.beam.CTCBeamState` (not imported: that module imports this one)
CTCBeamState = Any


class _Stepper:
    """One frame of the batched prefix beam search over a :class:`CTCBeamState` (sync-free).

    Extensions are scored for a set of ``M`` candidate tokens per utterance: the whole vocabulary,
    the ``token_beam`` acoustically best non-blank tokens of the frame, or, without fusion models,
    the ``2 * beam`` best ones, which is exact: an extension's score is the parent's score plus
    the token's log-prob except for at most ``beam`` entries per parent (blank, the repeated last
    token, the children already in the beam) whose score is lower, so a token outside the ``2 *
    beam`` best loses to ``beam`` better extensions of the same parent.
    """

    def __init__(self, batch: int, beam: int, vocab: int, blank: int, scorer: FusionScorer,
                 beta: float, beam_threshold: float, token_beam: Optional[int], dtype: torch.dtype,
                 device: torch.device) -> None:
        self.B, self.K, self.V = batch, beam, vocab
        self.blank = blank
        self.scorer = scorer
        fusion = scorer.fusion
        self.beta = beta
        self.thr = beam_threshold
        self.dtype = dtype
        # M: candidate tokens per frame; None: the full vocabulary (blank column masked).
        if token_beam is not None:
            m = min(token_beam, vocab - 1)
        elif not fusion:
            m = min(2 * beam, vocab - 1)
        else:
            m = None
        self.M = m if (m is not None and m < vocab - 1) else None
        # Merges of children into stays are computed whenever the search is over the full vocabulary.
        self.merge_all = token_beam is None or token_beam >= vocab - 1
        self.slots = torch.arange(beam, device=device)[None, :].expand(batch, beam)
        self.blank_t = torch.tensor([blank], device=device)
        m_used = self.M if self.M is not None else vocab
        self.slot_base = {m_used: self.slots * m_used + beam}  # where slot j's extensions start in cand

    def __call__(self, st: CTCBeamState, e: torch.Tensor, active: Optional[torch.Tensor], times: torch.Tensor) -> None:
        out = self.core(st.p_b, st.p_nb, st.fscore, st.length, st.last, st.hash, st.parent_hash, st.peak,
                        st.fstates, e, active)
        (st.p_b, st.p_nb, st.fscore, st.length, st.last, st.hash, st.parent_hash, st.peak, st.fstates,
         tok, parents) = out
        st.tree.record(tok, parents, times)

    def core(self, p_b: torch.Tensor, p_nb: torch.Tensor, fscore: torch.Tensor, length: torch.Tensor,
             last: torch.Tensor, hsh: torch.Tensor, parent_hash: torch.Tensor, peak: torch.Tensor,
             fstates: torch.Tensor, e: torch.Tensor, active: Optional[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """One frame as a pure function of the state tensors; returns the new ones, tokens and parents.

        ``active [B]`` (or ``None``: all) marks utterances that have this frame; the others keep
        their state (with ``active``, the first eight state tensors are updated in place and returned). Invalid slots carry ``hash == -1`` (``parent_hash == -2``), so the parent
        look-up needs no validity mask. Returns the new state tensors, then the tree's tokens and
        parents for this step.

        Timestamps: the tree keeps, for each prefix, the path of its best *arrival*: the frame where
        the paths that start its last token (``p(parent) + y[token]``) were most likely while it was
        in the beam, appended to the parent's own path as of the frame before. A prefix whose
        arrival beats its best so far re-links its tree node to the parent (token re-appended).
        """
        c = self._extensions(p_b, p_nb, fscore, length, last, fstates, e)
        stay = self._stays(c, p_b, p_nb, last, hsh, parent_hash, peak, e)
        new, tok_rec, par_rec = self._select(c, stay, p_b, fscore, length, last, hsh, parent_hash, fstates, e)
        if active is None:
            return (*new, tok_rec, par_rec)
        act = active[:, None]
        old = (p_b, p_nb, fscore, length, last, hsh, parent_hash, peak)
        # written into the old state tensors (every new one is computed): a captured step then needs
        # no copy back into its static buffers
        out = [torch.where(act, n, o, out=o) for n, o in zip(new[:8], old)]
        out.append(self.scorer.where(act, new[8], fstates) if c.lm_s is not None else fstates)
        return (*out, tok_rec.masked_fill(~act, -1), torch.where(act, par_rec, self.slots))

    def _extensions(self, p_b: torch.Tensor, p_nb: torch.Tensor, fscore: torch.Tensor, length: torch.Tensor,
                    last: torch.Tensor, fstates: torch.Tensor, e: torch.Tensor) -> "_Candidates":
        """Step 1: the candidate buffer ``[B, K + K*M + 1]`` (stays, then every slot's extensions by
        the ``M`` candidate tokens, then a dummy scatter target) with the extensions scored, fusion
        included; a slot's extension by its own last token counts only paths ending in blank."""
        B, K, V = self.B, self.K, self.V
        neg = -math.inf
        p_tot = torch.logaddexp(p_b, p_nb)  # [B, K]
        last_c = last.clamp(min=0)
        e_last = torch.gather(e, 1, last_c)  # (the empty prefix has p_nb = -inf, so its value is unused)
        bonus = fscore + self.beta * length if self.beta else fscore  # non-acoustic score of a stay
        bonus1 = bonus + self.beta if self.beta else bonus  # ... and of an extension
        if self.M is None:  # candidate tokens [B, M] and their log-probs
            M, tok_ids, e_ext = V, None, e
        else:
            M = self.M
            e_ext, tok_ids = torch.topk(e.index_fill(1, self.blank_t, neg), M, dim=1)
        dummy = K + K * M
        cand = torch.empty((B, dummy + 1), dtype=self.dtype, device=e.device)
        ext = cand[:, K:dummy].view(B, K, M)
        _add_into(ext, (p_tot + bonus1)[:, :, None], e_ext[:, None, :])
        # Fusion: the scorer's weighted sum over every token, gathered at the candidate tokens
        # (one row lookup is cheaper than per-token lookups).
        lm_s = lm_nx = None
        if self.scorer.num_models > 0:
            lm_s, lm_nx = self.scorer.advance(fstates.reshape(B * K, -1), dtype=self.dtype)  # [B*K, V], [B*K, V, Mm]
            if tok_ids is not None:
                idx3 = tok_ids[:, None, :].expand(B, K, M).reshape(B * K, M)
                lm_s, lm_nx = torch.gather(lm_s, 1, idx3), self.scorer.gather(lm_nx, idx3)
            ext.add_(lm_s.view(B, K, M))
            lm_s, lm_nx = lm_s.view(B, K * M), lm_nx.reshape(B, K * M, -1)
        if tok_ids is None:
            ext[:, :, self.blank] = neg
            last_in, last_pos = last >= 0, last_c
        else:
            last_in, last_pos = (tok_ids[:, None, :] == last[:, :, None]).max(dim=2)
        own = self.slot_base[M] + last_pos  # index of (j, last(j)) in cand
        fixed = p_b + e_last + bonus1
        if lm_s is not None:
            fixed = fixed + torch.gather(lm_s, 1, own - K)
        cand.scatter_(1, own.masked_fill(~last_in, dummy), fixed)
        return _Candidates(cand=cand, M=M, tok_ids=tok_ids, lm_s=lm_s, lm_nx=lm_nx, p_tot=p_tot, e_last=e_last,
                           bonus=bonus, last_in=last_in, last_pos=last_pos)

    def _stays(self, c: "_Candidates", p_b: torch.Tensor, p_nb: torch.Tensor, last: torch.Tensor,
               hsh: torch.Tensor, parent_hash: torch.Tensor, peak: torch.Tensor, e: torch.Tensor) -> "_Stays":
        """Step 2: each prefix staying (blank, or its last token repeated), merged with its parent's
        extension by the same token (which leaves the candidates); written to ``cand[:, :K]``."""
        K, M, neg = self.K, c.M, -math.inf
        has_parent, parent = (parent_hash[:, :, None] == hsh[:, None, :]).max(dim=2)
        par_from = torch.where(torch.gather(last, 1, parent) == last, torch.gather(p_b, 1, parent),
                               torch.gather(c.p_tot, 1, parent))
        child_in = has_parent if c.tok_ids is None else has_parent & c.last_in
        child = parent * M + c.last_pos + K
        merge = has_parent if self.merge_all else child_in
        stay_b = c.p_tot + e[:, self.blank, None]
        stay_nb = p_nb + c.e_last
        arrival = par_from + c.e_last
        stay_nb = torch.where(merge, torch.logaddexp(stay_nb, arrival), stay_nb)
        later_peak = merge & (arrival > peak)
        stay_peak = torch.where(later_peak, arrival, peak)
        c.cand.scatter_(1, child.masked_fill(~child_in, K + K * M), neg)
        _add_into(c.cand[:, :K], torch.logaddexp(stay_b, stay_nb), c.bonus)
        return _Stays(b=stay_b, nb=stay_nb, peak=stay_peak, later_peak=later_peak, parent=parent)

    def _select(self, c: "_Candidates", stay: "_Stays", p_b: torch.Tensor, fscore: torch.Tensor,
                length: torch.Tensor, last: torch.Tensor, hsh: torch.Tensor, parent_hash: torch.Tensor,
                fstates: torch.Tensor, e: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Step 3: the ``K`` best candidates minus those more than ``beam_threshold`` below the best
        (or impossible): their state tensors, and the tree's tokens and parents."""
        K, M, neg = self.K, c.M, -math.inf
        top, idx = torch.topk(c.cand[:, :K + K * M], K, dim=1)
        floor = (top[:, :1] - self.thr).clamp(min=torch.finfo(self.dtype).min)
        drop = top < floor
        is_ext = idx >= K
        eidx = (idx - K).clamp(min=0)
        src = torch.where(is_ext, eidx // M, idx)
        tok = eidx % M if c.tok_ids is None else torch.gather(c.tok_ids, 1, eidx % M)

        def g(x: torch.Tensor) -> torch.Tensor:
            return torch.gather(x, 1, src)

        g_last, g_hash = g(last), g(hsh)
        ext_ac = torch.where(g_last == tok, g(p_b), g(c.p_tot)) + torch.gather(e, 1, tok)
        g_fscore = g(fscore)
        ext_f = g_fscore + torch.gather(c.lm_s, 1, eidx) if c.lm_s is not None else g_fscore
        new = [
            g(stay.b).masked_fill_(is_ext | drop, neg),
            torch.where(is_ext, ext_ac, g(stay.nb)).masked_fill_(drop, neg),
            torch.where(is_ext, ext_f, g_fscore),
            g(length) + is_ext,
            torch.where(is_ext, tok, g_last),
            torch.where(is_ext, extend_hash(g_hash, tok), g_hash).masked_fill_(drop, -1),
            torch.where(is_ext, g_hash, g(parent_hash)).masked_fill_(drop, -2),
            torch.where(is_ext, ext_ac, g(stay.peak)),
        ]
        if c.lm_nx is not None:
            sc = self.scorer
            new.append(sc.where(is_ext, sc.gather(c.lm_nx, eidx), sc.gather(fstates, src)))
        else:
            new.append(fstates)
        # Tree: a new token from its parent, or a stay whose last token re-links to its best arrival.
        relink = g(stay.later_peak) & ~is_ext
        tok_rec = torch.where(is_ext, tok, g_last.masked_fill(~relink, -1))
        par_rec = torch.where(relink, g(stay.parent), src)
        return new, tok_rec, par_rec


def _add_into(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``dst[...] = a + b`` for a strided view ``dst``: ``out=`` eagerly (no temporary), a copy under
    torch.compile (Dynamo breaks the graph at a non-contiguous ``out=``; Inductor fuses the copy)."""
    if torch.compiler.is_compiling():
        dst.copy_(a + b)
    else:
        torch.add(a, b, out=dst)


@dataclass
class _Candidates:
    """One frame's candidate buffer and what the later steps need from building it (shapes ``[B, K]``
    unless said)."""

    cand: torch.Tensor  # [B, K + K*M + 1]
    M: int  # candidate tokens per slot
    tok_ids: Optional[torch.Tensor]  # [B, M] token of each candidate column; None: the whole vocabulary
    lm_s: Optional[torch.Tensor]  # [B, K*M] weighted fusion score of each extension; None without fusion
    lm_nx: Optional[torch.Tensor]  # [B, K*M, Mm] fusion states each extension reaches
    p_tot: torch.Tensor
    e_last: torch.Tensor  # the frame's log-prob of each slot's last token
    bonus: torch.Tensor  # non-acoustic score of a stay
    last_in: torch.Tensor  # whether each slot's last token is among the candidates
    last_pos: torch.Tensor  # its candidate column


@dataclass
class _Stays:
    """Each slot's stay after merging (``[B, K]``): blank / non-blank log-probs, best arrival, whether
    it is a later arrival (tree re-link), and the slot of its parent prefix."""

    b: torch.Tensor
    nb: torch.Tensor
    peak: torch.Tensor
    later_peak: torch.Tensor
    parent: torch.Tensor
