"""Batched beam search for RNN-T and TDT: ALSD++ and AES++ (Grigoryan et al.), with shallow fusion,
and WIND beam search (RNN-T, windowed expansion; Algorithm 3 of the WIND paper).

Both methods keep exactly ``beam`` hypotheses per utterance in fixed ``[B, K]`` tensors (``K`` =
beam); a removed hypothesis has score ``-inf``. Transcripts live in a backpointer tree
(:class:`~asrdecode.beam_hyps.BeamTree`), and equal transcripts are found in constant time by an
incremental hash (:func:`~asrdecode.beam_hyps.extend_hash`) plus the transcript length and last
token. One step is a sync-free function of the loop state (masked tensor ops only): one joint
call for all ``B*K`` hypotheses, one prediction-network call (``model.predict``, with
``select_state`` / ``replace_state``) for all ``B*K`` hypotheses, fusion scores for all of them,
selection, merging. The driver checks one flag between steps.

The search is exactly the one of :func:`~asrdecode.transducer.reference_beam.reference_beam_search`
(see its module docstring for the rules: which hypotheses expand in ALSD and AES, time advance,
the per-frame symbol cap, Eq. 2 / Eq. 3 blank scoring, early / late pruning, merging, final
LM scores); tests compare the two on random models. ``method="wind"`` is the search of
:func:`~asrdecode.transducer.reference_wind_beam.reference_wind_beam_search` (the same loop as AES++,
with Equation 1's windowed candidates: ``window * V`` per expanding hypothesis).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..beam_hyps import EMPTY_HASH, BeamTree, extend_hash
from ..errors import DecodingInputError, check_emissions, check_finite, check_lengths
from ..fusion import FusionModel, FusionScorer
from ..results import Hypothesis, Tokenizer, attach_text
from .model import TransducerModel, check_joint_width, check_model
from .reference_beam import MAX_SYMBOLS_GUARD, check_beam_args
from .reference_wind_beam import check_window

__all__ = ["beam_search"]

_NEG_INF = float("-inf")
#: None: skip the prediction network on steps without emissions on CPU only; True/False: force (tests)
_SKIP_IDLE_PREDICT: bool | None = None


class _BeamLoop:
    """Loop state of one batched beam search: ``[B, K]`` tensors updated by :meth:`step`."""

    def __init__(
        self,
        model: TransducerModel,
        enc: torch.Tensor,
        lengths: torch.Tensor,
        beam: int,
        method: str,
        scorer: FusionScorer,
        blank_scoring: str,
        pruning: str,
        max_symbols: int | None,
        beta: float = 0.0,
        window: int = 1,
    ) -> None:
        B, T, _ = enc.shape
        K = beam
        dev = enc.device
        self.model, self.B, self.K, self.T = model, B, K, T
        self.V, self.blank = model.vocab_size, model.blank_id
        self.tdt = model.durations is not None
        dvals = list(model.durations) if self.tdt else [0]
        self.D = len(dvals)
        self.dvals = torch.tensor(dvals, dtype=torch.long, device=dev)
        self.pack = max(dvals) + 1  # tree data = frame * pack + duration
        self.wind = method == "wind"
        self.aes = method in ("aes", "wind")  # both expand only the hypotheses on the earliest frame
        self.window = window
        self.win = torch.arange(window, device=dev)
        self.early = pruning == "early"
        self.scorer = scorer
        self.fused = scorer.num_models > 0
        self.lam = float(sum(scorer.weights))
        self.lm_weighted = blank_scoring == "lm_weighted" and self.lam != 0.0
        self.beta = float(beta)
        self.max_symbols = max_symbols
        self.dtype = enc.dtype
        self.enc_proj = model.project_encoder(enc)  # [B, T, H]
        self.lengths = lengths[:, None]  # [B, 1]
        self.b_idx = torch.arange(B, device=dev)[:, None]  # [B, 1]
        self.flat_base = (torch.arange(B, device=dev) * K)[:, None]  # [B, 1]
        N = B * K
        self.score = torch.full((B, K), _NEG_INF, dtype=enc.dtype, device=dev)
        self.score[:, 0] = 0.0
        zeros = torch.zeros((B, K), dtype=torch.long, device=dev)
        self.time, self.symbols, self.nlabels = zeros, zeros.clone(), zeros.clone()
        self.hash = torch.full((B, K), EMPTY_HASH, dtype=torch.long, device=dev)
        self.last = torch.full((B, K), self.blank, dtype=torch.long, device=dev)
        self.pred_state = model.initial_state(N, device=dev, dtype=enc.dtype)
        dec, self.pred_state = model.predict(torch.full((N,), self.blank, dtype=torch.long, device=dev), self.pred_state)
        self.dec_proj = model.project_decoder(dec)  # [N, H]
        # per-utterance models (stacked boosting trees) get the utterance of each hypothesis;
        # a single tree serves every utterance
        stacked = any(int(getattr(m, "num_trees", 1)) > 1 for m in scorer.models)
        utt = torch.arange(B, device=dev).repeat_interleave(K) if stacked else None
        self.lm_states = scorer.initial(N, dev, utterances=utt)  # [N, M]
        self.tree = BeamTree()
        self.emitted = torch.zeros(N, dtype=torch.bool, device=dev)
        self.labels = torch.full((N,), self.blank, dtype=torch.long, device=dev)
        self.active = (self.score > _NEG_INF) & (self.time < self.lengths)

    # -- one step: expand, select, merge, update ---------------------------------------------

    def step(self) -> None:
        B, K, V, D = self.B, self.K, self.V, self.D
        N = B * K
        valid = self.score > _NEG_INF
        active = valid & (self.time < self.lengths)
        if self.aes:  # only the earliest frame of each utterance expands
            big = torch.iinfo(torch.long).max
            tmin = torch.where(active, self.time, big).min(dim=1, keepdim=True).values
            expand = active & (self.time == tmin)
        else:
            expand = active
        carry = torch.where(expand, _NEG_INF, self.score)[..., None]  # [B, K, 1]: waiting / finished stay
        select = self._wind_select if self.wind else self._select
        sel_val, parent, c, is_carry, colc, lm_next = select(expand, carry)

        if self.wind:  # candidate c = j * V + token: first emission at window frame j
            tok, dur = c % V, c // V
        else:
            tok = c // D
            dur = self.dvals[c % D]  # [B, K] duration value (0 for RNN-T)
        ok = sel_val > _NEG_INF
        emitted = ok & ~is_carry & (tok != self.blank)
        blanked = ok & ~is_carry & (tok == self.blank)
        p_time = self.time.gather(1, parent)
        p_sym = self.symbols.gather(1, parent)
        label_adv = dur if (self.tdt or self.wind) else torch.zeros_like(dur)
        blank_adv = dur.clamp(min=1) if self.tdt else (dur + 1 if self.wind else torch.ones_like(dur))
        # labels on the frame a label lands on: +1 on the same frame; a TDT label leaves its frame
        # (0 on the next), a WIND label is the first one on frame t + j (1)
        moved = 1 if self.wind else 0
        symbols = torch.where(emitted, torch.where(label_adv == 0, p_sym + 1, moved), torch.where(blanked, 0, p_sym))
        adv = torch.where(emitted, label_adv, torch.where(blanked, blank_adv, 0))
        if self.max_symbols is not None:
            stays = (label_adv == 0) | self.wind
            forced = emitted & stays & (symbols >= self.max_symbols)
            adv = adv + forced.long()
            symbols = torch.where(forced, 0, symbols)
        time = torch.minimum(p_time + adv, self.lengths)
        hsh = torch.where(emitted, extend_hash(self.hash.gather(1, parent), tok), self.hash.gather(1, parent))
        nlabels = self.nlabels.gather(1, parent) + emitted.long()
        last = torch.where(emitted, tok, self.last.gather(1, parent))

        # merge equal transcripts on the same frame: best one keeps the log-sum-exp of the group
        eq = ((hsh[:, :, None] == hsh[:, None, :]) & (time[:, :, None] == time[:, None, :])
              & (nlabels[:, :, None] == nlabels[:, None, :]) & (last[:, :, None] == last[:, None, :])
              & ok[:, :, None] & ok[:, None, :])  # [B, K, K]
        s_i, s_j = sel_val[:, :, None], sel_val[:, None, :]
        idx = torch.arange(K, device=eq.device)
        better = eq & ((s_j > s_i) | ((s_j == s_i) & (idx[None, None, :] < idx[None, :, None])))
        leader = ok & ~better.any(dim=2)
        group = torch.logsumexp(torch.where(eq, s_j, _NEG_INF), dim=2)
        self.score = torch.where(leader, group, _NEG_INF)
        self._selected_ok = ok  # selected before merging (tests check the merges)

        # prediction-network states follow their hypotheses; :meth:`predict_step` advances them
        parent_flat = (self.flat_base + parent).view(N)
        em_flat = emitted.view(N)
        self.pred_state = self.model.select_state(self.pred_state, parent_flat)
        self.dec_proj = self.dec_proj[parent_flat]
        self.emitted, self.labels = em_flat, torch.where(emitted, tok, self.blank).view(N)
        # fusion states
        lm_prev = self.lm_states[parent_flat]
        if lm_next is not None:
            if self.early:
                nxt = lm_next.view(N * K, -1)[parent_flat * K + colc.view(N)]
            else:
                nxt = lm_next[parent_flat, tok.view(N)]
            self.lm_states = torch.where(em_flat[:, None], nxt, lm_prev)
        else:
            self.lm_states = lm_prev

        self.tree.record(torch.where(emitted, tok, -1), parent, p_time * self.pack + label_adv)
        self.time, self.symbols, self.hash, self.nlabels, self.last = time, symbols, hsh, nlabels, last
        self.active = (self.score > _NEG_INF) & (self.time < self.lengths)

    def _select(
        self, expand: torch.Tensor, carry: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """ALSD / AES candidates at each hypothesis's frame, fused, and the top ``K``.

        Returns the selected scores ``[B, K]``, parent slots, candidate indices (``token * D + d``),
        carry flags, candidate columns (early pruning) and the fusion states after each token.
        """
        B, K, V, D = self.B, self.K, self.V, self.D
        N = B * K
        C = V * D
        frames = self.time.clamp(max=max(self.T - 1, 0))
        logits = self.model.joint(self.enc_proj[self.b_idx, frames], self.dec_proj.view(B, K, -1))
        logits = logits.to(self.dtype)
        lp_tok = torch.log_softmax(logits[..., :V], dim=-1)  # [B, K, V]
        if self.tdt:
            lp_dur = torch.log_softmax(logits[..., V:], dim=-1)  # [B, K, D]
            acoustic = lp_tok[..., :, None] + lp_dur[..., None, :]  # [B, K, V, D]
        else:
            acoustic = lp_tok[..., :, None]
        # fusion terms per token: blank_add for the blank, label_add[k] for labels
        lp_blank = lp_tok[..., self.blank]  # [B, K]
        blank_add = self.lam * lp_blank if self.lm_weighted else torch.zeros_like(lp_blank)
        nonblank_add = (self.lam * torch.log1p(-torch.exp(lp_blank))) if self.lm_weighted else torch.zeros_like(lp_blank)
        if self.beta:
            nonblank_add = nonblank_add + self.beta
        tok_ids = torch.arange(V, device=lp_tok.device)
        is_blank_tok = tok_ids == self.blank  # [V]
        acoustic = acoustic.reshape(B, K, C)
        exp_mask = expand[..., None]

        if not self.early:
            if self.fused:
                lm, lm_next = self.scorer.advance(self.lm_states, dtype=self.dtype)  # [N, V], [N, V, M]
                lm = lm.view(B, K, V)
            else:
                lm, lm_next = torch.zeros_like(lp_tok), None
            add = torch.where(is_blank_tok, blank_add[..., None], lm + nonblank_add[..., None])  # [B, K, V]
            fused = acoustic.view(B, K, V, D) + add[..., None]
            cand = torch.where(exp_mask, self.score[..., None] + fused.reshape(B, K, C), _NEG_INF)
            cand = torch.cat([cand, carry], dim=2)  # [B, K, C + 1]
            width = C + 1
            sel_val, sel_idx = cand.view(B, K * width).topk(K, dim=1)
            parent = sel_idx // width
            col = sel_idx % width
            is_carry = col == C
            c = colc = col.clamp(max=C - 1)
        else:
            top_ac, top_c = acoustic.topk(K, dim=2)  # per hypothesis, acoustic only: [B, K, K]
            top_tok = top_c // D
            if self.fused:
                lm_sel, lm_next = self.scorer.score_tokens(self.lm_states, top_tok.view(N, K), dtype=self.dtype)
                lm_sel = lm_sel.view(B, K, K)
            else:
                lm_sel, lm_next = torch.zeros_like(top_ac), None
            add = torch.where(top_tok == self.blank, blank_add[..., None], lm_sel + nonblank_add[..., None])
            cand = torch.where(exp_mask, self.score[..., None] + top_ac + add, _NEG_INF)
            cand = torch.cat([cand, carry], dim=2)  # [B, K, K + 1]
            width = K + 1
            sel_val, sel_idx = cand.view(B, K * width).topk(K, dim=1)
            parent = sel_idx // width
            col = sel_idx % width
            is_carry = col == K
            colc = col.clamp(max=K - 1)
            c = top_c.view(B, K * K).gather(1, parent * K + colc)

        return sel_val, parent, c, is_carry, colc, lm_next

    def _wind_select(
        self, expand: torch.Tensor, carry: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, None]:
        """WIND candidates (Equation 1 in log space) of the expanding hypotheses, and the top ``K``.

        Each expanding hypothesis reads the window ``t .. t + n - 1`` (``n = min(window, length - t)``):
        candidate ``j * V + v`` is label ``v`` first emitted at frame ``t + j`` (blanks before it),
        candidate ``(n - 1) * V + blank`` is blank on the whole window. Returns the selected scores
        ``[B, K]``, parent slots, candidate indices, carry flags, candidate columns, no LM states.
        """
        B, K, V, W = self.B, self.K, self.V, self.window
        frames = self.time[..., None] + self.win  # [B, K, W]
        valid = frames < self.lengths[..., None]
        enc = self.enc_proj[self.b_idx[..., None], frames.clamp(max=max(self.T - 1, 0))]  # [B, K, W, H]
        logits = self.model.joint(enc, self.dec_proj.view(B, K, 1, -1)).to(self.dtype)
        lp = torch.log_softmax(logits, dim=-1)  # [B, K, W, V]
        lp_blank = torch.where(valid, lp[..., self.blank], 0.0)
        before = torch.cumsum(lp_blank, dim=-1) - lp_blank  # log prod of blanks before frame j
        n = valid.sum(dim=-1, keepdim=True)  # [B, K, 1]
        is_blank_tok = torch.arange(V, device=lp.device) == self.blank
        label = before[..., None] + lp + self.beta
        whole_blank = lp_blank.sum(dim=-1)[..., None, None]  # [B, K, 1, 1]
        last = (self.win == n - 1)[..., None]  # [B, K, W, 1]
        cand = torch.where(is_blank_tok, torch.where(last, whole_blank, _NEG_INF),
                           torch.where(valid[..., None], label, _NEG_INF))
        C = W * V
        cand = torch.where(expand[..., None], self.score[..., None] + cand.reshape(B, K, C), _NEG_INF)
        cand = torch.cat([cand, carry], dim=2)  # [B, K, C + 1]
        sel_val, sel_idx = cand.view(B, K * (C + 1)).topk(K, dim=1)
        parent = sel_idx // (C + 1)
        col = sel_idx % (C + 1)
        return sel_val, parent, col.clamp(max=C - 1), col == C, col, None

    def predict_step(self) -> None:
        """The prediction network, once for all ``B*K`` hypotheses; kept where a label was emitted."""
        out, st_new = self.model.predict(self.labels, self.pred_state)
        self.pred_state = self.model.replace_state(self.pred_state, st_new, self.emitted)
        self.dec_proj = torch.where(self.emitted[:, None], self.model.project_decoder(out), self.dec_proj)

    # -- results ---------------------------------------------------------------------------------

    def results(self, nbest: int) -> list[list[Hypothesis]]:
        final = self.score
        if self.fused:
            final = final + self.scorer.final(self.lm_states, dtype=self.dtype).view(self.B, self.K)
        vals, slots = final.topk(nbest, dim=1)
        slots = torch.where(vals > _NEG_INF, slots, -1)
        seqs = self.tree.backtrack(slots)
        vals_l = vals.tolist()
        out: list[list[Hypothesis]] = []
        for b in range(self.B):
            row = []
            for n in range(nbest):
                if vals_l[b][n] == _NEG_INF:
                    continue
                toks, data = seqs[b][n]
                row.append(Hypothesis(
                    tokens=toks,
                    timestamps=[x // self.pack for x in data],
                    score=float(vals_l[b][n]),
                    durations=[x % self.pack for x in data] if self.tdt else None,
                ))
            out.append(row)
        return out


@torch.inference_mode()
def beam_search(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    beam: int = 4,
    method: str = "alsd",
    fusion: Sequence[tuple[FusionModel, float]] = (),
    blank_scoring: str = "lm_weighted",
    pruning: str = "late",
    max_symbols_per_frame: int | None = 10,
    beta: float = 0.0,
    nbest: int = 1,
    tokenizer: Tokenizer | None = None,
    window: int = 8,
) -> list[Hypothesis] | list[list[Hypothesis]]:
    """Batched ALSD++ / AES++ beam search of RNN-T / TDT encoder output, with optional shallow fusion.

    Args:
        model: a :class:`TransducerModel` (TDT when ``model.durations`` is set).
        encoder_output: ``[B, T, D]`` encoder output (not projected).
        lengths: ``[B]`` valid frames per utterance (default: all ``T``).
        beam: hypotheses kept per utterance, ``1 <= beam <= model.vocab_size``.
        method: "alsd" (ALSD++, every active hypothesis expands each step), "aes" (AES++,
            frame synchronous: hypotheses on the earliest frame expand until they leave it) or
            "wind" (WIND beam search, RNN-T, no fusion: the hypotheses on the earliest frame read a
            window of ``window`` frames and may emit their next label on any of them; see
            :mod:`~asrdecode.transducer.reference_wind_beam`).
        fusion: ``[(FusionModel, weight), ...]`` (n-gram LMs, boosting trees) over the model's ids.
        blank_scoring: "lm_weighted" (Eq. 3 of the ALSD++ paper) or "none" (Eq. 2).
        pruning: "late" (fuse over the whole vocabulary, then select) or "early" (each
            hypothesis's ``beam`` best acoustic candidates, then fuse and select).
        max_symbols_per_frame: a label that makes this many on one frame also advances one frame
            (as greedy's ``max_symbols``); None = no cap (a model that never emits blank then fails).
        beta: bonus added to the score of every emitted label (length reward, mostly used with
            an LM); 0 by default.
        nbest: hypotheses returned per utterance (``1 <= nbest <= beam``).
        tokenizer: fills ``Hypothesis.text`` when given.
        window: WIND window (frames, ``>= 1``), used by ``method="wind"`` only; window 1 is AES++.

    Returns:
        ``nbest == 1``: ``B`` best hypotheses; else ``B`` lists of up to ``nbest`` hypotheses, best
        first (fewer when merging left fewer distinct ones). Scores are the summed fused log-scores
        plus the fusion end-of-sentence scores.
    """
    check_model(model)
    enc = check_emissions("encoder_output", encoder_output, ndim=3)
    check_finite("encoder_output", enc)
    wind = method == "wind"
    check_beam_args(model, beam, "aes" if wind else method, blank_scoring, pruning, max_symbols_per_frame, nbest)
    if wind:
        check_window(model, window)
        if fusion:
            raise DecodingInputError("method='wind' does not support fusion")
        if pruning != "late":
            raise DecodingInputError("method='wind' supports pruning='late' only")
    if not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise DecodingInputError(f"beta must be a finite number, got {beta!r}")
    scorer = FusionScorer(fusion, model.vocab_size, model.blank_id)
    B, T, _ = enc.shape
    lengths = check_lengths(lengths, B, T, device=enc.device)
    loop = _BeamLoop(model, enc, lengths, beam, method, scorer, blank_scoring, pruning, max_symbols_per_frame,
                     float(beta), window if wind else 1)
    if loop.B and loop.T:
        check_joint_width(model, loop.enc_proj[:1, 0], loop.dec_proj[:1])
    steps = 0
    # On CPU a step where no hypothesis emitted skips the prediction network (one more flag
    # check); on GPU it always runs, keeping the loop free of extra host synchronisation.
    skip_idle = enc.device.type == "cpu" if _SKIP_IDLE_PREDICT is None else _SKIP_IDLE_PREDICT
    while bool(loop.active.any()):
        loop.step()
        if not skip_idle or bool(loop.emitted.any()):
            loop.predict_step()
        steps += 1
        if max_symbols_per_frame is None and steps % 1024 == 0 and int(loop.symbols.max()) > MAX_SYMBOLS_GUARD:
            raise DecodingInputError(
                f"model emitted over {MAX_SYMBOLS_GUARD} labels on one frame; set max_symbols_per_frame"
            )
    nb = loop.results(nbest)
    for row in nb:
        attach_text(row, tokenizer)
    if nbest == 1:
        return [row[0] for row in nb]
    return nb
