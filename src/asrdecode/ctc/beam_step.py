"""One frame of the batched CTC prefix beam search (the tensor engine), sync-free and static-shape.

All hypotheses of all utterances live in ``[B, K]`` slots (``K = beam``, a
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

Layout (few kernels per frame: what a GPU's launch-bound loop pays for). The state lives in two
packed buffers of a :class:`FrameBuffers`, ``floats [6, B, K]`` (the five float fields, then the
frame's scratch row ``stay_peak``) and ``ints [4 + M, B, K]`` (last token, hash, parent hash, the
``M`` fusion states, then the scratch row of each slot's parent slot). Per candidate, next to its
score, the frame keeps its ``p_nb`` and ``p_b`` (``cb``): a stay's merge reads its parent's extension
there (its arrival), and the kept candidates' ``p_nb`` / ``p_b`` are one gather. The kept candidates'
other fields come from one gather per state buffer; the new state is written into preallocated rows
(``out=``) and then into the state by one masked ``where`` per buffer (utterances without this frame
keep theirs). The candidate index decodes through a constant table (source slot, token). Every view
is made once, when the buffers are.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..beam_hyps import HASH_LOW, HASH_M1, HASH_M2, HASH_P1, HASH_P2
from ..fusion import FusionScorer

__all__ = ["Stepper", "FrameBuffers", "FLOAT_FIELDS", "INT_FIELDS"]

#: a :class:`~asrdecode.ctc.beam.CTCBeamState` (not imported: that module imports this one)
CTCBeamState = Any

#: the float state rows of :attr:`FrameBuffers.floats`, in order
FLOAT_FIELDS = ("peak", "fscore", "length", "p_nb", "p_b")
#: the int state rows of :attr:`FrameBuffers.ints` before the fusion states
INT_FIELDS = ("last", "hash", "parent_hash")
_PEAK, _FSCORE, _LENGTH, _P_NB, _P_B, _STAY_PEAK = range(6)
_LAST, _HASH, _PHASH = range(3)


class FrameBuffers:
    """The packed search state of ``B`` utterances and a frame's preallocated scratch (see the module
    docstring), with every view the frame uses made once.

    ``floats [6, B, K]``: rows :data:`FLOAT_FIELDS`, then ``stay_peak``; ``ints [3 + M + 1, B, K]``: rows
    :data:`INT_FIELDS`, the ``M`` fusion states, the parent slot. ``cb [3, B, K + K*M + 1]``: per
    candidate (stays, extensions, dummy) its score, its ``p_nb`` (the acoustic log-prob of an extension:
    ``p(c) + y[k]``; of a stay: ``stay_nb``) and its ``p_b`` (``-inf`` for an extension; ``stay_b``).
    """

    def __init__(self, step: "Stepper", device: torch.device, floats: Optional[torch.Tensor] = None,
                 ints: Optional[torch.Tensor] = None) -> None:
        """New buffers (zero state), or around the given state tensors ``floats`` / ``ints`` (the shapes
        above; the step writes them in place)."""
        B, K, M, Mm = step.B, step.K, step.M_used, step.scorer.num_models
        dt, lg = step.dtype, torch.long
        self.floats = torch.zeros((6, B, K), dtype=dt, device=device) if floats is None else floats
        self.ints = torch.zeros((3 + Mm + 1, B, K), dtype=lg, device=device) if ints is None else ints
        self.f_state, self.i_state = self.floats[:5], self.ints[:3 + Mm]
        f, i = self.floats, self.ints
        self.peak, self.fscore, self.length, self.p_nb, self.p_b, self.stay_peak = f.unbind(0)
        self.p_tot = torch.empty((B, K), dtype=dt, device=device)
        self.p_tot_col = self.p_tot[:, :, None]
        self.last, self.hash, self.parent_hash = i[_LAST], i[_HASH], i[_PHASH]
        self.fst = i[3:3 + Mm]  # [M, B, K]
        self.fst_rows = self.fst.permute(1, 2, 0).reshape(B * K, Mm)  # the scorer's [N, M] view
        self.parent = i[-1]
        # the frame's emissions (the caller writes them) and the views the step reads
        V = step.V
        self.e = torch.zeros((B, V), dtype=dt, device=device)
        self.e3, self.e_row, self.e_blank = self.e[None], self.e[:, None, :], self.e[:, step.blank:step.blank + 1]
        self.base = torch.empty((B, K), dtype=dt, device=device)  # an extension's score before its token
        self.base_col = self.base[:, :, None]
        self.has_parent = torch.zeros((B, K), dtype=torch.bool, device=device)
        # candidates: [stays K | K x M extensions | dummy scatter target]
        N = K + K * M
        self.cb = torch.full((3, B, N + 1), -math.inf, dtype=dt, device=device)
        self.cand, self.ac, pb = self.cb.unbind(0)
        self.cand_sel, self.cand_stay = self.cand[:, :N], self.cand[:, :K]
        self.ext = self.cand[:, K:N].view(B, K, M)
        self.ac_ext, self.ac_stay, self.pb_stay = self.ac[:, K:N].view(B, K, M), self.ac[:, :K], pb[:, :K]
        self.cand_ac, self.ac_pb = self.cb[:2], self.cb[1:]
        self.own = torch.empty((B, K), dtype=lg, device=device)
        self.own_2 = self.own[None].expand(2, B, K)
        self.own_vals = torch.empty((2, B, K), dtype=dt, device=device)  # the own extension's score, p_nb
        self.own_score, self.own_ac = self.own_vals.unbind(0)
        self.ext_blank = self.ext[:, :, min(step.blank, M - 1)]  # (full vocabulary only: the blank's extensions)
        # the candidates' weighted fusion scores, laid out as ``cand`` (0 for the stays and the dummy)
        self.lm_pad = torch.zeros((B, N + 1), dtype=dt, device=device)
        self.lm_ext = self.lm_pad[:, K:N].view(B, K, M)
        self.lm: Any = None
        if Mm:
            if step.tok_tab is None:
                self.lm = step.scorer.prepare(self.fst_rows, self.lm_ext, dt)
            else:
                self.lm_full = torch.empty((B * K, V), dtype=dt, device=device)
                self.lm_full_3 = self.lm_full.view(B, K, V)
                self.lm = step.scorer.prepare(self.fst_rows, self.lm_full, dt)
            self.nx_flat = self.lm.next.view(B, K * V, Mm) if self.lm.stable else None
        self.top = torch.empty((B, K), dtype=dt, device=device)
        self.idx = torch.empty((B, K), dtype=lg, device=device)
        self.idx_flat = self.idx.view(B * K)
        self.dec = torch.empty((step.dec_tab.shape[0], B, K), dtype=lg, device=device)
        self.dec_flat = self.dec.view(-1, B * K)
        self.src = self.dec[0]
        self.src_f = self.src[None].expand(6, B, K)
        self.src_i = self.src[None].expand(self.ints.shape[0], B, K)
        self.idx_2 = self.idx[None].expand(2, B, K)
        self.parent_hash_col, self.hash_row = self.parent_hash[:, :, None], self.hash[:, None, :]
        self.top_first = self.top[:, :1]
        self.dec_rows = self.dec.unbind(0)
        self.e_idx_m = self.dec[-1][:, :, None].expand(B, K, Mm)
        self.g_f = torch.empty_like(self.floats)
        self.g_i = torch.empty_like(self.ints)
        self.g_f_rows, self.g_i_rows = self.g_f.unbind(0), self.g_i.unbind(0)
        self.g_fst, self.g_hash_1 = self.g_i[3:3 + Mm], self.g_i[_HASH:_HASH + 1]
        self.new_f = torch.empty((5, B, K), dtype=dt, device=device)
        self.new_i = torch.empty((3 + Mm, B, K), dtype=lg, device=device)
        self.new_f_rows, self.new_i_rows = self.new_f.unbind(0), self.new_i.unbind(0)
        self.new_fst = self.new_i[3:]
        self.hash_pair = self.new_i[_HASH:_PHASH + 1]
        self.nb_pb = self.new_f[_P_NB:_P_B + 1]
        self.rec = torch.empty((2, B, K), dtype=lg, device=device)  # the step's tree tokens and parents
        self.rec_tok, self.rec_par = self.rec.unbind(0)
        if step.tok_tab is not None:  # candidate tokens of the frame, then -1 (the stays' column)
            self.tokens = torch.full((B, M + 1), -1, dtype=lg, device=device)
            self.tok_ids = self.tokens[:, :M]
            self.tok_ids_3 = self.tok_ids[:, None, :].expand(B, K, M)
            self.e_top = torch.empty((B, M), dtype=dt, device=device)
            self.e_top_row = self.e_top[:, None, :]

    def load(self, st: CTCBeamState, rows: int) -> None:
        """Copy the state fields of ``st`` (its ``rows`` utterances) into rows ``:rows`` of the buffers."""
        for r, name in enumerate(FLOAT_FIELDS):
            self.floats[r, :rows].copy_(getattr(st, name))
        for r, name in enumerate(INT_FIELDS):
            self.ints[r, :rows].copy_(getattr(st, name))
        self.fst[:, :rows].copy_(st.fstates.permute(2, 0, 1))

    def store(self, st: CTCBeamState, rows: int) -> None:
        """The state rows ``:rows`` back into the fields of ``st`` (contiguous copies)."""
        for r, name in enumerate(FLOAT_FIELDS):
            setattr(st, name, self.floats[r, :rows].clone())
        for r, name in enumerate(INT_FIELDS):
            setattr(st, name, self.ints[r, :rows].clone())
        st.fstates = self.fst[:, :rows].permute(1, 2, 0).contiguous()


class Stepper:
    """One frame of the batched prefix beam search over :class:`FrameBuffers` (sync-free).

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
        self.beta = beta
        self.thr = beam_threshold
        self.dtype = dtype
        # M: candidate tokens per frame; None: the full vocabulary (blank column masked).
        if token_beam is not None:
            m = min(token_beam, vocab - 1)
        elif not scorer.fusion:
            m = min(2 * beam, vocab - 1)
        else:
            m = None
        self.M = m if (m is not None and m < vocab - 1) else None
        M = self.M_used = self.M if self.M is not None else vocab
        # Merges of children into stays are computed whenever the search is over the full vocabulary.
        self.merge_all = token_beam is None or token_beam >= vocab - 1
        K = beam
        self.slots = torch.arange(beam, device=device)[None, :].expand(batch, beam)
        self.slots_m = self.slots * M  # where slot j's extensions start, less K
        self.blank_t = torch.tensor([blank], device=device)
        self.neg = torch.tensor(-math.inf, dtype=dtype, device=device)
        self.dummy = torch.tensor(K + K * M, device=device)
        self.drop_hash = torch.tensor([-1, -2], device=device)[:, None, None]
        self.idle_rec = torch.stack([torch.full((batch, beam), -1, device=device), self.slots])  # [2, B, K]
        self.floor_min = torch.finfo(dtype).min
        # the candidate index decoded: source slot, token (-1: a stay; a column of the frame's candidate
        # tokens when M < V), the token plus one (hash), extension index (0: stay)
        n = torch.arange(K + K * M, device=device)
        is_ext = n >= K
        e_idx = (n - K).clamp(min=0)
        src = torch.where(is_ext, e_idx // M, n)
        col = torch.where(is_ext, e_idx % M, -1 if self.M is None else M)
        if self.M is None:
            self.tok_tab: Optional[torch.Tensor] = None
            self.dec_tab = torch.stack([src, col, col + 1, e_idx])
        else:
            self.tok_tab = col
            self.dec_tab = torch.stack([src, col, e_idx])
        self.hash_shift = torch.tensor([32, 0], device=device)[:, None, None]
        self.hash_mul = torch.tensor([HASH_P1, HASH_P2], device=device)[:, None, None]
        self.hash_mod = torch.tensor([HASH_M1, HASH_M2], device=device)[:, None, None]

    def buffers(self, device: torch.device, floats: Optional[torch.Tensor] = None,
                ints: Optional[torch.Tensor] = None) -> FrameBuffers:
        return FrameBuffers(self, device, floats, ints)

    def frame(self, fb: FrameBuffers, act: Optional[torch.Tensor]) -> None:
        """One frame of emissions ``fb.e [B, V]`` (written by the caller) into the state of ``fb``
        (in place); the tree's tokens and parents of the step into ``fb.rec [2, B, K]``.

        ``act [B, 1]`` (or ``None``: all) marks utterances that have this frame; the others keep their
        state and record no token (parent: the slot itself). Invalid slots carry ``hash == -1``
        (``parent_hash == -2``), so the parent look-up needs no validity mask.

        Timestamps: the tree keeps, for each prefix, the path of its best *arrival*: the frame where
        the paths that start its last token (``p(parent) + y[token]``) were most likely while it was
        in the beam, appended to the parent's own path as of the frame before. A prefix whose
        arrival beats its best so far re-links its tree node to the parent (token re-appended).
        """
        lm_nx = self._extensions(fb)
        self._select(fb, lm_nx, act)

    def _extensions(self, fb: FrameBuffers) -> Optional[torch.Tensor]:
        """Steps 1 and 2: the candidates ``fb.cand`` (stays, extensions fused and merged), their fusion
        scores ``fb.lm_pad`` and the stays' fields in the scratch rows; returns the fusion states the
        extensions reach, ``[B, K*M, Mm]`` (``None`` without fusion). A slot's extension by its own last
        token counts only paths ending in blank."""
        B, K, M = self.B, self.K, self.M_used
        neg = -math.inf
        e, p_b, p_nb, last = fb.e, fb.p_b, fb.p_nb, fb.last
        p_tot = torch.logaddexp(p_b, p_nb, out=fb.p_tot)
        last_c = last.clamp(min=0)
        e_last = torch.gather(e, 1, last_c)  # (the empty prefix has p_nb = -inf, so its value is unused)
        bonus = fb.fscore + self.beta * fb.length if self.beta else fb.fscore  # non-acoustic score of a stay
        bonus1 = bonus + self.beta if self.beta else bonus  # ... and of an extension
        if self.M is None:
            e_row = fb.e_row
        else:
            if torch.compiler.is_compiling():  # views of fb.tokens made in the trace: AOT mis-sizes a
                tok_ids = fb.tokens[:, :M]  # graph input that is a strided view of another input
                tok_ids_3 = tok_ids[:, None, :].expand(B, K, M)
            else:
                tok_ids, tok_ids_3 = fb.tok_ids, fb.tok_ids_3
            _topk_into(e.index_fill(1, self.blank_t, neg), M, fb.e_top, tok_ids)
            e_row = fb.e_top_row
        torch.add(p_tot, bonus1, out=fb.base)
        _add_into(fb.ext, fb.base_col, e_row)
        _add_into(fb.ac_ext, fb.p_tot_col, e_row)  # each extension's p_nb (its own token's: below)
        lm_nx = None
        if fb.lm is not None:
            lm_nx = fb.lm.run()  # [B*K, V, Mm]; the weighted scores in fb.lm_ext (or fb.lm_full)
            if self.M is not None:
                _gather_into(fb.lm_ext, fb.lm_full_3, tok_ids_3)
                lm_nx = self.scorer.gather(lm_nx, tok_ids_3.reshape(B * K, M)).reshape(B, K * M, -1)
            elif fb.nx_flat is not None:
                lm_nx = fb.nx_flat
            else:
                lm_nx = lm_nx.reshape(B, K * M, -1)
            fb.ext.add_(fb.lm_ext)
        if self.M is None:
            fb.ext_blank.fill_(neg)
            last_in, last_pos = last >= 0, last_c
        else:
            last_in, last_pos = _bool_max(tok_ids_3 == last[:, :, None])
        lk = last_pos + K
        own = lk + self.slots_m  # (j, last(j)) among the candidates
        torch.add(p_b, e_last, out=fb.own_ac)
        if lm_nx is not None:
            torch.add(fb.own_ac + bonus1, torch.gather(fb.lm_pad, 1, own), out=fb.own_score)
        else:
            torch.add(fb.own_ac, bonus1, out=fb.own_score)
        torch.where(last_in, own, self.dummy, out=fb.own)
        fb.cand_ac.scatter_(2, fb.own_2, fb.own_vals)  # score and p_nb of (j, last(j))
        # Stays: each prefix staying (blank, or its last token repeated), merged with its parent's
        # extension by the same token (which leaves the candidates): that extension's p_nb is the
        # arrival, p(parent) + y[last].
        if torch.compiler.is_compiling():  # (the parent slot row is state the tree step reads: kept written)
            has_parent, parent = _bool_max(fb.parent_hash_col == fb.hash_row)
            fb.has_parent.copy_(has_parent)
            fb.parent.copy_(parent)
        else:
            has_parent, parent = torch.max(fb.parent_hash_col == fb.hash_row, dim=2, out=(fb.has_parent, fb.parent))
        child = torch.add(lk, parent, alpha=M)
        if self.M is not None and self.merge_all:  # the parent's extension may be outside its M tokens
            par_from = torch.where(torch.gather(last, 1, parent) == last, torch.gather(p_b, 1, parent),
                                   torch.gather(p_tot, 1, parent))
            arrival = par_from + e_last
        else:
            arrival = torch.gather(fb.ac, 1, child)
        child_in = has_parent if self.M is None else has_parent & last_in
        merge = has_parent if self.merge_all else child_in
        _add_into(fb.pb_stay, p_tot, fb.e_blank)
        stay_nb = p_nb + e_last
        _where_into(fb.ac_stay, merge, torch.logaddexp(stay_nb, arrival), stay_nb)
        torch.where(merge & (arrival > fb.peak), arrival, fb.peak, out=fb.stay_peak)
        fb.cand.scatter_(1, torch.where(child_in, child, self.dummy), neg)
        _add_into(fb.cand_stay, torch.logaddexp(fb.pb_stay, fb.ac_stay), bonus)
        return lm_nx

    def _select(self, fb: FrameBuffers, lm_nx: Optional[torch.Tensor], act: Optional[torch.Tensor]) -> None:
        """Step 3: the ``K`` best candidates minus those more than ``beam_threshold`` below the best
        (or impossible) become the state; the tree's tokens and parents into ``fb.rec``."""
        K = self.K
        top, _ = torch.topk(fb.cand_sel, K, dim=1, out=(fb.top, fb.idx))
        drop = top < (fb.top_first - self.thr).clamp(min=self.floor_min)
        torch.index_select(self.dec_tab, 1, fb.idx_flat, out=fb.dec_flat)
        src = fb.src
        if self.M is None:
            _, tok, tok_1, _ = fb.dec_rows  # (the last row: e_idx_m)
        else:
            tok = torch.gather(fb.tokens, 1, fb.dec_rows[1])
            tok_1 = tok + 1
        is_ext = tok >= 0
        torch.gather(fb.floats, 2, fb.src_f, out=fb.g_f)
        torch.gather(fb.ints, 2, fb.src_i, out=fb.g_i)
        g, gi, new, new_i = fb.g_f_rows, fb.g_i_rows, fb.new_f_rows, fb.new_i_rows
        g_last, g_hash = gi[_LAST], gi[_HASH]
        torch.gather(fb.ac_pb, 2, fb.idx_2, out=fb.nb_pb)  # the kept candidates' p_nb and p_b
        torch.where(is_ext, new[_P_NB], g[_STAY_PEAK], out=new[_PEAK])
        torch.where(drop, self.neg, fb.nb_pb, out=fb.nb_pb)
        if lm_nx is not None:  # (a stay's fusion score is 0: its fscore is unchanged)
            torch.add(g[_FSCORE], torch.gather(fb.lm_pad, 1, fb.idx), out=new[_FSCORE])
        else:
            new[_FSCORE].copy_(g[_FSCORE])
        torch.add(g[_LENGTH], is_ext, out=new[_LENGTH])
        torch.where(is_ext, tok, g_last, out=new_i[_LAST])
        torch.where(is_ext, _extend_hash(self, fb.g_hash_1, tok_1), g_hash, out=new_i[_HASH])
        torch.where(is_ext, g_hash, gi[_PHASH], out=new_i[_PHASH])
        torch.where(drop, self.drop_hash, fb.hash_pair, out=fb.hash_pair)
        if lm_nx is not None:
            nx = torch.gather(lm_nx, 1, fb.e_idx_m).permute(2, 0, 1)
            torch.where(is_ext, nx, fb.g_fst, out=fb.new_fst)
        # Tree: a new token from its parent, or a stay whose last token re-links to its best arrival
        # (its stay peak moved: stay_peak != peak).
        relink = (g[_STAY_PEAK] != g[_PEAK]) > is_ext
        torch.where(relink, g_last, tok, out=fb.rec_tok)
        torch.where(relink, gi[-1], src, out=fb.rec_par)
        if act is None:
            fb.f_state.copy_(fb.new_f)
            fb.i_state.copy_(fb.new_i)
        else:
            torch.where(act, fb.new_f, fb.f_state, out=fb.f_state)
            torch.where(act, fb.new_i, fb.i_state, out=fb.i_state)
            torch.where(act, fb.rec, self.idle_rec, out=fb.rec)


def _bool_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.max(dim=2)`` of a bool ``x [B, K, N]``: whether a row has a True, and the first one's index. Under
    torch.compile over uint8: Inductor's CPU code for a max with its index over bool mixes two vector mask
    types and does not build (beam 8 and V=257, say)."""
    if torch.compiler.is_compiling():
        hit, idx = x.to(torch.uint8).max(dim=2)
        return hit != 0, idx
    return x.max(dim=2)


def _extend_hash(step: Stepper, h: torch.Tensor, tok_1: torch.Tensor) -> torch.Tensor:
    """:func:`asrdecode.beam_hyps.extend_hash` of ``h [1, B, K]`` by the tokens ``tok_1 - 1`` (the same
    values), both halves at once (``[2, B, K]``)."""
    halves = (h >> step.hash_shift) & HASH_LOW
    return ((torch.addcmul(tok_1, halves, step.hash_mul) % step.hash_mod) << step.hash_shift).sum(0)


def _topk_into(x: torch.Tensor, k: int, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``torch.topk(x, k, dim=1)`` written into ``values`` (contiguous) and the strided view ``indices``
    (``out=`` eagerly, a copy under torch.compile, as :func:`_add_into`); returns the values."""
    if torch.compiler.is_compiling():
        val, idx = torch.topk(x, k, dim=1)
        values.copy_(val)
        indices.copy_(idx)
        return values
    return torch.topk(x, k, dim=1, out=(values, indices))[0]


def _gather_into(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor) -> None:
    """``dst[...] = src.gather(2, index)`` for a strided view ``dst`` (as :func:`_add_into`)."""
    if torch.compiler.is_compiling():
        dst.copy_(torch.gather(src, 2, index))
    else:
        torch.gather(src, 2, index, out=dst)


def _where_into(dst: torch.Tensor, cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``dst[...] = torch.where(cond, a, b)`` for a strided view ``dst`` (as :func:`_add_into`)."""
    if torch.compiler.is_compiling():
        dst.copy_(torch.where(cond, a, b))
    else:
        torch.where(cond, a, b, out=dst)


def _add_into(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``dst[...] = a + b`` for a strided view ``dst``: ``out=`` eagerly (no temporary), a copy under
    torch.compile (Dynamo breaks the graph at a non-contiguous ``out=``; Inductor fuses the copy)."""
    if torch.compiler.is_compiling():
        dst.copy_(a + b)
    else:
        torch.add(a, b, out=dst)
