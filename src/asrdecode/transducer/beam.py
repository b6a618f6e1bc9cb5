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

Streaming (every method, RNN-T and TDT): ``return_state=True`` returns a :class:`BeamState`
(the ``[B, K]`` tensors, the tree, and per utterance the encoder frames still needed), passed
back with ``state=`` for the next chunk. A chunk that is not an utterance's last
(``final=False``) pauses that utterance's search at the step that would read frames not yet
received (ALSD: a hypothesis reached the chunk end; WIND: the window passes it; AES never reads
ahead), and a TDT jump past the chunk end is kept for the next chunk, so chunked decoding takes
exactly the whole-utterance steps (tests: random chunk boundaries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..beam_hyps import EMPTY_HASH, BeamTree, extend_hash
from ..errors import DecodingInputError, check_emissions, check_finite, check_lengths
from ..fusion import FusionModel, FusionScorer
from ..results import Hypothesis, Tokenizer, attach_text
from .model import TransducerModel, check_joint_width, check_model
from .reference_beam import MAX_SYMBOLS_GUARD, check_beam_args
from .reference_wind_beam import check_window

__all__ = ["beam_search", "BeamState"]

_NEG_INF = float("-inf")
#: None: skip the prediction network on steps without emissions on CPU only; True/False: force (tests)
_SKIP_IDLE_PREDICT: bool | None = None


@dataclass
class BeamState:
    """What :func:`beam_search` carries from one chunk of encoder output to the next (streaming).

    Attributes:
        hyps: the ``[B, K]`` hypothesis tensors (``score``, ``time`` relative to ``offset``,
            ``symbols``, ``hash``, ``nlabels``, ``last``), ``pred_state`` (model pytree, batch
            ``B*K``), ``dec_proj`` ``[B*K, H]``, ``lm_states`` ``[B*K, M]``.
        tree: the backpointer tree of every step so far (frames are global).
        offset: ``[B]`` global index of the first frame of ``tail``.
        received: ``[B]`` frames received so far.
        tail: per utterance, the projected frames ``[n_b, H]`` from ``offset`` on that are still
            needed (hypotheses not past them, or paused before them).
        config: (beam, method, window) of the search, checked on the next chunk.
    """

    hyps: dict[str, Any]
    tree: BeamTree
    offset: torch.Tensor
    received: torch.Tensor
    tail: list[torch.Tensor]
    config: tuple[int, str, int]


_CARRIED = ("score", "time", "symbols", "hash", "nlabels", "last", "pred_state", "dec_proj", "lm_states")


class _BeamLoop:
    """Loop state of one batched beam search: ``[B, K]`` tensors updated by :meth:`step`."""

    def __init__(
        self,
        model: TransducerModel,
        enc_proj: torch.Tensor,
        lengths: torch.Tensor,
        beam: int,
        method: str,
        scorer: FusionScorer,
        blank_scoring: str,
        pruning: str,
        max_symbols: int | None,
        beta: float = 0.0,
        window: int = 1,
        carried: BeamState | None = None,
        offset: torch.Tensor | None = None,
        final: torch.Tensor | None = None,
    ) -> None:
        B, T, _ = enc_proj.shape
        K = beam
        dev = enc_proj.device
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
        self.dtype = enc_proj.dtype
        self.enc_proj = enc_proj  # [B, T, H]
        self.lengths = lengths[:, None]  # [B, 1]
        self.final = torch.ones((B, 1), dtype=torch.bool, device=dev) if final is None else final[:, None]
        self.offset = (torch.zeros(B, dtype=torch.long, device=dev) if offset is None else offset)[:, None]
        self.b_idx = torch.arange(B, device=dev)[:, None]  # [B, 1]
        self.flat_base = (torch.arange(B, device=dev) * K)[:, None]  # [B, 1]
        N = B * K
        self.score = torch.full((B, K), _NEG_INF, dtype=self.dtype, device=dev)
        self.score[:, 0] = 0.0
        zeros = torch.zeros((B, K), dtype=torch.long, device=dev)
        self.time, self.symbols, self.nlabels = zeros, zeros.clone(), zeros.clone()
        self.hash = torch.full((B, K), EMPTY_HASH, dtype=torch.long, device=dev)
        self.last = torch.full((B, K), self.blank, dtype=torch.long, device=dev)
        self.pred_state = model.initial_state(N, device=dev, dtype=self.dtype)
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
        if carried is not None:
            for name in _CARRIED:
                setattr(self, name, carried.hyps[name])
            self.tree = carried.tree
        self.active = self._expanding()

    def _expanding(self) -> torch.Tensor:
        """``[B, K]``: the hypotheses the next step expands.

        ALSD: every active one; AES / WIND: the active ones on the earliest frame. Before the last
        chunk (``final=False``) an utterance whose next step needs frames not received yet pauses:
        ALSD when a hypothesis has reached the chunk end, WIND when the window passes it (AES never
        reads past the earliest frame), so chunked decoding takes the whole-utterance steps.
        """
        valid = self.score > _NEG_INF
        active = valid & (self.time < self.lengths)
        if not self.aes:
            return active & (self.final | ~(valid & (self.time >= self.lengths)).any(dim=1, keepdim=True))
        big = torch.iinfo(torch.long).max
        tmin = torch.where(active, self.time, big).min(dim=1, keepdim=True).values
        expand = active & (self.time == tmin)
        if self.wind:
            expand = expand & (self.final | (tmin + self.window <= self.lengths))
        return expand

    # -- one step: expand, select, merge, update ---------------------------------------------

    def step(self) -> None:
        B, K, V, D = self.B, self.K, self.V, self.D
        N = B * K
        expand = self.active
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
        time = p_time + adv
        # a TDT jump past the end stops at the end; before the last chunk it is kept (next chunk)
        time = torch.where(self.final, torch.minimum(time, self.lengths), time)
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

        self.tree.record(torch.where(emitted, tok, -1), parent, (self.offset + p_time) * self.pack + label_adv)
        self.time, self.symbols, self.hash, self.nlabels, self.last = time, symbols, hsh, nlabels, last
        self.active = self._expanding()

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
            sel_val, parent, col, is_carry = _top_k_with_carry(cand, carry)
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
            sel_val, parent, col, is_carry = _top_k_with_carry(cand, carry)
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


def _top_k_with_carry(
    cand: torch.Tensor, carry: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``K`` best of candidates ``[B, K, W]`` plus each hypothesis' carried score ``[B, K, 1]``.

    Returns (scores, parent slot, column in ``0..W`` — ``W`` is the carry, is-carry), each ``[B, K]``.
    """
    B, K, W = cand.shape
    width = W + 1
    sel_val, sel_idx = torch.cat([cand, carry], dim=2).view(B, K * width).topk(K, dim=1)
    col = sel_idx % width
    return sel_val, sel_idx // width, col, col == W


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
    state: BeamState | None = None,
    return_state: bool = False,
    final: bool | Sequence[bool] | torch.Tensor = True,
) -> list[Hypothesis] | list[list[Hypothesis]] | tuple[list[Hypothesis] | list[list[Hypothesis]], BeamState]:
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
        state: the state returned for the previous chunk (streaming, RNN-T and TDT, every
            method); same batch, beam, method, window and fusion models.
        return_state: also return the :class:`BeamState` to carry into the next chunk.
        final: whether this chunk ends the utterances (one flag, or ``[B]`` flags). Before an
            utterance's last chunk pass False: a search whose next step needs frames not received
            yet waits for them, so the hypotheses after the last chunk equal whole-utterance
            decoding exactly. Chunks after an utterance's final one must have no frames for it.

    Returns:
        ``nbest == 1``: ``B`` best hypotheses; else ``B`` lists of up to ``nbest`` hypotheses, best
        first (fewer when merging left fewer distinct ones). Scores are the summed fused log-scores
        plus the fusion end-of-sentence scores. Streaming: the current beam's hypotheses
        (timestamps in global frames), and the state when ``return_state``.
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
    config = (beam, method, window if wind else 1)
    if state is not None and (len(state.tail) != B or state.config != config):
        raise DecodingInputError(f"state is for batch {len(state.tail)} and (beam, method, window) {state.config}, "
                                 f"not batch {B} and {config}")
    final_t = torch.as_tensor(final, dtype=torch.bool, device=enc.device).reshape(-1)
    if final_t.numel() not in (1, B):
        raise DecodingInputError(f"final must be one flag or {B} flags, got {final_t.numel()}")
    final_t = final_t.expand(B).clone()
    if state is None and bool(final_t.all()):  # whole utterances (or a first and last chunk)
        enc_proj, offset, received = model.project_encoder(enc), None, lengths
    else:
        enc_proj, lengths, offset, received = _chunk_buffer(model, enc, lengths, state)
    loop = _BeamLoop(model, enc_proj, lengths, beam, method, scorer, blank_scoring, pruning, max_symbols_per_frame,
                     float(beta), config[2], carried=state, offset=offset, final=final_t)
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
    out = [row[0] for row in nb] if nbest == 1 else nb
    if not return_state:
        return out
    return out, _carry(loop, received, config)


def _chunk_buffer(
    model: TransducerModel, enc: torch.Tensor, lengths: torch.Tensor, state: BeamState | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The frames a chunk call searches: per utterance the carried tail, then the new chunk's frames
    from the carried offset on. Returns (buffer ``[B, T', H]``, lengths ``[B]``, offset ``[B]``
    (global index of buffer frame 0), frames received ``[B]`` after this chunk)."""
    proj = model.project_encoder(enc)  # [B, T, H]
    B = enc.shape[0]
    if state is None:
        zeros = torch.zeros(B, dtype=torch.long, device=enc.device)
        return proj, lengths, zeros, lengths.clone()
    n = lengths.tolist()
    off, rec = state.offset.tolist(), state.received.tolist()
    rows = []
    for b in range(B):
        drop = min(max(off[b] - rec[b], 0), n[b])  # frames a TDT jump already passed
        rows.append(torch.cat([state.tail[b], proj[b, drop : n[b]]]))
    new_len = torch.tensor([r.shape[0] for r in rows], dtype=torch.long, device=enc.device)
    buf = proj.new_zeros((B, max(int(new_len.max()) if B else 0, 1), proj.shape[-1]))
    for b, r in enumerate(rows):
        buf[b, : r.shape[0]] = r
    return buf, new_len, state.offset, state.received + lengths


def _carry(loop: _BeamLoop, received: torch.Tensor, config: tuple[int, str, int]) -> BeamState:
    """The state after a chunk: frames before each utterance's earliest hypothesis are dropped."""
    valid = loop.score > _NEG_INF
    big = torch.iinfo(torch.long).max
    start = torch.where(valid, loop.time, big).min(dim=1).values  # [B]; every utterance has a hypothesis
    hyps = {name: getattr(loop, name) for name in _CARRIED}
    hyps["time"] = loop.time - start[:, None]
    st, ln = start.tolist(), loop.lengths[:, 0].tolist()
    tail = [loop.enc_proj[b, min(st[b], ln[b]) : ln[b]].clone() for b in range(loop.B)]
    return BeamState(hyps=hyps, tree=loop.tree, offset=loop.offset[:, 0] + start, received=received,
                     tail=tail, config=config)
