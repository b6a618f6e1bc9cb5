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
:func:`~asrdecode.transducer.reference_wind_beam.reference_wind_beam_search` (Algorithm 3 of the WIND
paper: per-frame hypothesis lists kept in a ring of ``window + 1`` lists of ``beam`` slots, so the
state is ``[B, (window + 1) * beam]``; one step pops each utterance's earliest list, runs the prefix
search, expands each popped hypothesis over the window (Equation 1, ``window * V`` candidates, its
``beam`` best kept) and merges / prunes every list with its arrivals; fusion as for ALSD++ / AES++).

Streaming (every method, RNN-T and TDT): ``return_state=True`` returns a :class:`BeamState`
(the ``[B, K]`` tensors, the tree, and per utterance the encoder frames still needed), passed
back with ``state=`` for the next chunk. A chunk that is not an utterance's last
(``final=False``) pauses that utterance's search at the step that would read frames not yet
received (ALSD: a hypothesis reached the chunk end; WIND: the window passes it; AES never reads
ahead), and a TDT jump past the chunk end is kept for the next chunk, so chunked decoding takes
exactly the whole-utterance steps (tests: random chunk boundaries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, cast

import torch

from ..accel import StepRunner, resolve_mode
from ..beam_hyps import EMPTY_HASH, BeamTree, extend_hash
from ..errors import DecodingInputError, check_emissions, check_finite, check_lengths
from ..fusion import FusionModel, FusionScorer
from ..native.choice import use_native
from ..results import Hypothesis, Tokenizer, attach_text
from .durations import DurationRule
from .model import TransducerModel, check_joint_width, check_model
from . import _checks
from ._checks import (_MISSING, DEFAULT_MAX_SYMBOLS, check_beam_args, check_beta, check_encoder_output, check_tokenizer,
                      check_window, check_expansion_gamma, resolve_max_symbols)

__all__ = ["beam_search", "BeamState"]

_NEG_INF = float("-inf")
#: None: skip the prediction network on steps without emissions on CPU only; True/False: force (tests)
_SKIP_IDLE_PREDICT: bool | None = None
#: steps the preallocated tree of the static path holds at first (None: ``max(64, 2 * frames)``); it doubles
_TREE_CAPACITY: int | None = None


@dataclass
class BeamState:
    """What :func:`beam_search` carries from one chunk of encoder output to the next (streaming).

    Attributes:
        hyps: the ``[B, S]`` hypothesis tensors (``score``, ``time`` relative to ``offset``,
            ``symbols``, ``hash``, ``nlabels``, ``last``), ``pred_state`` (model pytree, batch
            ``B*S``), ``dec_proj`` ``[B*S, H]``, ``lm_states`` ``[B*S, M]``; ``S`` slots per
            utterance: ``beam``, for WIND ``(window + 1) * beam`` (its ring of frame lists).
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

    @staticmethod
    def cat(states: Sequence["BeamState"], pred_state: Any) -> "BeamState":
        """One batch state from batch-1 ``states`` (streams): tensors concatenated, per-utterance
        ``tail`` lists joined, the settings of the first, a fresh tree; ``pred_state`` is the batch's
        prediction-network state (model pytree; the streams keep theirs outside, see
        :class:`~asrdecode.streaming.state_batching.StatePool`)."""
        hyps: dict[str, Any] = {}
        for name, value in states[0].hyps.items():
            if name == "pred_state":
                hyps[name] = pred_state
            elif isinstance(value, torch.Tensor):
                hyps[name] = torch.cat([s.hyps[name] for s in states])
            else:
                raise TypeError(f"BeamState.hyps[{name!r}] is a {type(value).__name__}; only tensors and the "
                                "prediction state can be batched")
        return BeamState(hyps=hyps, tree=BeamTree(), offset=torch.cat([s.offset for s in states]),
                         received=torch.cat([s.received for s in states]),
                         tail=[x for s in states for x in s.tail], config=states[0].config)

    def split_into(self, states: Sequence["BeamState"]) -> Any:
        """Give each batch-1 state its rows of this batch state (its tree extended by its row of the new
        steps); returns the batch's prediction-network state, which the states do not hold."""
        n = len(states)

        def rows(x: torch.Tensor, b: int) -> torch.Tensor:
            per = x.shape[0] // n
            return x[b * per:(b + 1) * per].clone()

        for b, st in enumerate(states):
            st.hyps = {**{k: rows(v, b) for k, v in self.hyps.items() if k != "pred_state"}, "pred_state": None}
            st.tree.extend(self.tree.take_rows(torch.tensor([b])))
            st.offset, st.received = rows(self.offset, b), rows(self.received, b)
            st.tail = [self.tail[b]]
        return self.hyps["pred_state"]


_CARRIED = ("score", "time", "symbols", "hash", "nlabels", "last", "pred_state", "dec_proj", "lm_states")


class _BeamLoop:
    """Loop state of one batched beam search: ``[B, S]`` tensors updated by :meth:`step`.

    With ``static=True`` (torch.compile, CUDA graphs) the tree is preallocated and written in place
    (:meth:`BeamTree.write`), and :func:`_static_step` (step + prediction network for every row)
    is the whole step: static shapes, no host synchronisation.
    """

    #: the attributes a step replaces (for CUDA graphs: the static buffers); the tree is written in place
    STATE = ("score", "time", "symbols", "hash", "nlabels", "last", "pred_state", "dec_proj", "lm_states",
             "emitted", "labels", "active", "tree")

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
        gamma: float | None = None,
        carried: BeamState | None = None,
        offset: torch.Tensor | None = None,
        final: torch.Tensor | None = None,
        static: bool = False,
        native: bool = False,
    ) -> None:
        B, T, _ = enc_proj.shape
        K = beam
        dev = enc_proj.device
        self.model, self.B, self.K, self.T = model, B, K, T
        self.V, self.blank = model.vocab_size, model.blank_id
        self.rule = DurationRule.of(model)  # advance rule and tree data = frame * pack + duration
        self.tdt = self.rule.tdt
        self.D = len(self.rule.values)
        self.dvals = torch.tensor(self.rule.values, dtype=torch.long, device=dev)
        self.wind = method == "wind"
        self.aes = method in ("aes", "wind")  # both expand only the hypotheses on the earliest frame
        self.window = window
        self.gamma = gamma  # WIND's expansion threshold (None: off)
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
        # slots per utterance: K, WIND: a ring of ``window + 1`` frame lists of K (slot ``r * K + k``
        # holds a hypothesis whose global frame is ``r`` modulo ``window + 1``)
        self.R = window + 1 if self.wind else 1
        S = self.S = self.R * K
        self.b_idx = torch.arange(B, device=dev)[:, None]  # [B, 1]
        self.flat_base = (torch.arange(B, device=dev) * S)[:, None]  # [B, 1]
        self.k_idx = torch.arange(K, device=dev)[None, :]  # [1, K]
        self.r_idx = torch.arange(self.R, device=dev)[None, :, None]  # [1, R, 1]
        self.slot_idx = torch.arange(S, device=dev)[None, :]  # [1, S]
        self.slot_list = self.slot_idx // K  # [1, S]: the frame list of each slot
        N = B * S
        self.score = torch.full((B, S), _NEG_INF, dtype=self.dtype, device=dev)
        self.score[:, 0] = 0.0
        zeros = torch.zeros((B, S), dtype=torch.long, device=dev)
        self.time, self.symbols, self.nlabels = zeros, zeros.clone(), zeros.clone()
        self.hash = torch.full((B, S), EMPTY_HASH, dtype=torch.long, device=dev)
        self.last = torch.full((B, S), self.blank, dtype=torch.long, device=dev)
        if carried is None:  # every slot starts from the same blank-primed state: one row computed, then copied
            dec, first = model.predict(torch.full((1,), self.blank, dtype=torch.long, device=dev),
                                       model.initial_state(1, device=dev, dtype=self.dtype))
            same = torch.zeros(N, dtype=torch.long, device=dev)
            self.pred_state = model.select_state(first, same)
            self.dec_proj = model.project_decoder(dec).index_select(0, same)  # [N, H]
        # per-utterance models (stacked boosting trees) get the utterance of each hypothesis;
        # a single tree serves every utterance
        stacked = any(int(getattr(m, "num_trees", 1)) > 1 for m in scorer.models)
        utt = torch.arange(B, device=dev).repeat_interleave(S) if stacked else None
        self.lm_states = scorer.initial(N, dev, utterances=utt)  # [N, M]
        self.static = static
        self.compact = not static and dev.type == "cpu"  # CPU eager: per-step row subsets (host syncs)
        cap = _TREE_CAPACITY if _TREE_CAPACITY is not None else max(64, 2 * T)
        self.tree = BeamTree.preallocated(B, S, dev, capacity=cap) if static else BeamTree()
        self._carried_tree: BeamTree | None = None
        self.emitted = torch.zeros(N, dtype=torch.bool, device=dev)
        self.labels = torch.full((N,), self.blank, dtype=torch.long, device=dev)
        if carried is not None:
            for name in _CARRIED:
                setattr(self, name, carried.hyps[name])
            if static:
                self._carried_tree = carried.tree
            else:
                self.tree = carried.tree
        self.active = self._expanding()
        # the native engine runs the steps' bookkeeping (the networks stay torch calls)
        self.native = native and not static
        self._engine: Any = None
        if self.native:
            from ..native.transducer_beam import NativeBeamStep
            from ..native.transducer_wind import NativeWindStep

            self._enc_rows = enc_proj.reshape(B * T, enc_proj.shape[-1])  # [B*T, H]: row b * T + frame
            self._engine = NativeWindStep(self, scorer) if self.wind else NativeBeamStep(self, scorer)

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
        if self.wind:  # [B, 1]: the utterances whose next step pops their earliest frame's list
            return active.any(dim=1, keepdim=True) & (self.final | (tmin + self.window <= self.lengths))
        return expand

    # -- one step: expand, select, merge, update ---------------------------------------------

    def step(self) -> None:
        if self._engine is not None:
            self._native_wind_step() if self.wind else self._native_step()
            return
        if self.wind:
            self._wind_step()
            return
        B, K, D = self.B, self.K, self.D
        N = B * K
        expand = self.active
        carry = torch.where(expand, _NEG_INF, self.score)[..., None]  # [B, K, 1]: waiting / finished stay
        sel_val, parent, c, is_carry, colc, lm_next = self._select(expand, carry)
        tok = c // D
        dur = self.dvals[c % D]  # [B, K] duration value (0 for RNN-T)
        ok = sel_val > _NEG_INF
        emitted = ok & ~is_carry & (tok != self.blank)
        blanked = ok & ~is_carry & (tok == self.blank)
        p_time = self.time.gather(1, parent)
        p_sym = self.symbols.gather(1, parent)
        label_adv = self.rule.label_advance(dur)
        blank_adv = self.rule.blank_advance(dur)
        # labels on the frame a label lands on: +1 on the same frame; a TDT label leaves its frame
        symbols = torch.where(emitted, torch.where(label_adv == 0, p_sym + 1, 0), torch.where(blanked, 0, p_sym))
        adv = torch.where(emitted, label_adv, torch.where(blanked, blank_adv, 0))
        if self.max_symbols is not None:
            forced = emitted & (label_adv == 0) & (symbols >= self.max_symbols)
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
        sc = self.scorer
        lm_prev = sc.select(self.lm_states, parent_flat)
        if lm_next is not None:
            if self.early:
                nxt = sc.select(lm_next.view(N * K, -1), parent_flat * K + colc.view(N))
            else:
                nxt = sc.select(lm_next, (parent_flat, tok.view(N)))
            self.lm_states = sc.where(em_flat, nxt, lm_prev)
        else:
            self.lm_states = lm_prev

        self._record(torch.where(emitted, tok, -1), parent, self.rule.pack_data(self.offset + p_time, label_adv))
        self.time, self.symbols, self.hash, self.nlabels, self.last = time, symbols, hsh, nlabels, last
        self.active = self._expanding()

    def _native_step(self) -> None:
        """One ALSD++ / AES++ step with the bookkeeping on the native engine: the joint on the expanding
        slots' frames (torch), the engine's step (in place), the prediction-network states moved to their
        hypotheses; :meth:`predict_step` then runs the network on the emitting rows."""
        eng = self._engine
        n = eng.num_active  # the joint on the expanding slots only
        enc = self._enc_rows.index_select(0, eng.frame_rows[:n])  # [n, H]
        dec = self.dec_proj if n == self.dec_proj.shape[0] else self.dec_proj.index_select(0, eng.joint_rows[:n])
        logits = self.model.joint(enc, dec).to(self.dtype).contiguous()  # [n, V (+ D)]
        eng.run(logits)
        parent = eng.parent_flat
        self.pred_state = self.model.select_state(self.pred_state, parent)
        self.dec_proj = self.dec_proj.index_select(0, parent)
        self.emitted, self.labels = eng.emitted, eng.labels
        self._selected_ok = eng.selected_ok

    def _native_wind_step(self) -> None:
        """One WIND step with the bookkeeping on the native engine: the popped hypotheses' joint over their
        window (torch), the engine's step (in place), the prediction-network states moved to their
        hypotheses; :meth:`predict_step` then runs the network on the emitting rows."""
        eng = self._engine
        m = eng.pop()
        enc = self._enc_rows.index_select(0, eng.enc_rows[:m])  # [m, H]
        dec = self.dec_proj.index_select(0, eng.dec_rows[:m])
        logits = self.model.joint(enc, dec).to(self.dtype).contiguous()  # [m, V]
        eng.run(logits)
        parent = eng.parent_flat
        self.pred_state = self.model.select_state(self.pred_state, parent)
        self.dec_proj = self.dec_proj.index_select(0, parent)
        self.emitted, self.labels = eng.emitted, eng.labels

    def _wind_step(self) -> None:
        """One WIND step (module :mod:`~asrdecode.transducer.reference_wind_beam`, steps 1-5) for every
        utterance whose earliest frame list is popped: prefix search, windowed expansions (each
        hypothesis's ``beam`` best), then every frame list merged with its arrivals and pruned to ``beam``."""
        pop = self._wind_pop()
        win = self._wind_window(pop)
        lm_full, lm_next, expand = self._wind_prefix_search(pop, win)
        arrivals = self._wind_expansions(pop, win, lm_full, lm_next, expand)
        self._wind_merge(pop, arrivals)

    def _wind_pop(self) -> "_WindPop":
        """Step 1: per utterance, the list of the earliest frame any hypothesis is on, and its hypotheses."""
        B, K, R = self.B, self.K, self.R
        go = self.active  # [B, 1]
        valid = self.score > _NEG_INF
        pending = valid & (self.time < self.lengths)
        big = torch.iinfo(torch.long).max
        tmin = torch.where(pending, self.time, big).min(dim=1, keepdim=True).values
        tmin = torch.where(go, tmin, 0)  # [B, 1]
        r0 = torch.remainder(self.offset + tmin, R)  # the popped list
        pslots = r0 * K + self.k_idx  # [B, K]
        p_score = self.score.gather(1, pslots)
        p_flat = (self.flat_base + pslots).view(B * K)
        return _WindPop(go=go, tmin=tmin, r0=r0, slots=pslots, score=p_score, sym=self.symbols.gather(1, pslots),
                        hash=self.hash.gather(1, pslots), nlabels=self.nlabels.gather(1, pslots),
                        last=self.last.gather(1, pslots), live=go & (p_score > _NEG_INF), flat=p_flat,
                        lm=self.scorer.select(self.lm_states, p_flat))

    def _wind_window(self, pop: "_WindPop") -> "_WindWindow":
        """Step 2: Equation 1 over the window for the popped hypotheses (fusion added later)."""
        B, K, V, W = self.B, self.K, self.V, self.window
        blank, dev = self.blank, self.score.device
        frames = pop.tmin + self.win  # [B, W]
        fvalid = (frames < self.lengths)[:, None, :]  # [B, 1, W]
        enc = self.enc_proj[self.b_idx, frames.clamp(max=max(self.T - 1, 0))]  # [B, W, H]
        dec = self.dec_proj[pop.flat].view(B, K, 1, -1)
        enc = enc[:, None].expand(B, K, W, enc.shape[-1])
        if self.compact:  # CPU eager: the joint for the popped hypotheses only (one sync)
            rows = pop.live.view(-1).nonzero().squeeze(1)
            logits = self.model.joint(enc.reshape(B * K, W, -1)[rows], dec.view(B * K, 1, -1)[rows])
            lp = torch.zeros((B * K, W, V), dtype=self.dtype, device=dev)
            lp = lp.index_copy(0, rows, torch.log_softmax(logits.to(self.dtype), dim=-1)).view(B, K, W, V)
        else:
            lp = torch.log_softmax(self.model.joint(enc, dec).to(self.dtype), dim=-1)  # [B, K, W, V]
        lpb = lp[..., blank]  # [B, K, W]
        blank_fr = torch.where(fvalid, (1.0 + self.lam) * lpb if self.lm_weighted else lpb, 0.0)
        blank_ac = torch.where(fvalid, lpb, 0.0)
        nonblank = self.lam * torch.log1p(-torch.exp(lpb)) if self.lm_weighted else torch.zeros_like(lpb)
        label_base = torch.cumsum(blank_fr, dim=-1) - blank_fr + nonblank + self.beta  # [B, K, W]
        whole = blank_fr.sum(dim=-1)  # [B, K]: blank over the whole window
        n = fvalid.sum(dim=-1, keepdim=True)  # [B, 1, 1]
        last_frame = self.win == n - 1  # [B, 1, W]
        is_blank = torch.arange(V, device=dev) == blank
        # candidate columns j * V + v: label v first on window frame j; (n - 1) * V + blank: blank on all
        blank_col = torch.where(last_frame, whole[..., None], _NEG_INF)[..., None]  # [B, K, W, 1]
        no_lm = torch.where(is_blank, blank_col, torch.where(fvalid[..., None], label_base[..., None] + lp, _NEG_INF))
        return _WindWindow(lp=lp, fvalid=fvalid, blank_ac=blank_ac, last_frame=last_frame, is_blank=is_blank,
                           no_lm=no_lm)

    def _wind_prefix_search(self, pop: "_WindPop", win: "_WindWindow") -> tuple[Any, Any, torch.Tensor]:
        """Step 3: ``B = A + (v,)`` on this frame gets A's paths "then v here" and A is removed (A's
        score updated in ``pop.score``). Returns late pruning's fusion rows and which hypotheses expand."""
        B, K, V = self.B, self.K, self.V
        pair = (pop.live[:, :, None] & pop.live[:, None, :] & (pop.nlabels[:, :, None] == pop.nlabels[:, None, :] + 1)
                & (pop.hash[:, :, None] == extend_hash(pop.hash[:, None, :], pop.last[:, :, None])))  # [B, K(b), K(a)]
        if self.max_symbols is not None:
            pair = pair & (pop.sym[:, None, :] + 1 < self.max_symbols)
        last_bk = pop.last[:, :, None].expand(B, K, K)  # token v of pair (b, a)
        if self.early:
            lm_v, _ = self.scorer.score_tokens(pop.lm, last_bk.transpose(1, 2).reshape(B * K, K), dtype=self.dtype)
            lm_v = lm_v.view(B, K, K).transpose(1, 2)  # [B, K(b), K(a)]
            lm_full = lm_next = None
        else:
            lm_full, lm_next = self.scorer.advance(pop.lm, dtype=self.dtype)  # [B*K, V], [B*K, V, M]
            lm_full = lm_full.view(B, K, V)
            lm_v = lm_full[:, None].expand(B, K, K, V).gather(3, last_bk[..., None])[..., 0]
        first = win.no_lm[:, :, 0, :]  # [B, K(a), V]: the window's first frame
        complete = pop.score[:, None, :] + first[:, None].expand(B, K, K, V).gather(3, last_bk[..., None])[..., 0] + lm_v
        pop.score = torch.logsumexp(torch.cat([pop.score[..., None], torch.where(pair, complete, _NEG_INF)], dim=2),
                                    dim=2)
        return lm_full, lm_next, pop.live & ~pair.any(dim=1)

    def _wind_expansions(self, pop: "_WindPop", win: "_WindWindow", lm_full: Any, lm_next: Any,
                         expand: torch.Tensor) -> "_WindArrivals":
        """Step 4: each expanding hypothesis's ``K`` best (label, frame) or whole-window blank continuations."""
        B, K, V, W = self.B, self.K, self.V, self.window
        M = self.lm_states.shape[-1]
        C = W * V
        if self.early:
            ac = torch.where(win.fvalid[..., None], (torch.cumsum(win.blank_ac, -1) - win.blank_ac)[..., None] + win.lp,
                             _NEG_INF)
            ac = torch.where(win.is_blank, torch.where(win.last_frame, win.blank_ac.sum(-1)[..., None],
                                                       _NEG_INF)[..., None], ac)
            rank, col = ac.reshape(B, K, C).topk(K, dim=2)  # [B, K, K]
            val = win.no_lm.reshape(B, K, C).gather(2, col)
            tok = col % V
            lm_s, lm_nx = self.scorer.score_tokens(pop.lm, tok.view(B * K, K), dtype=self.dtype)
            val = val + lm_s.view(B, K, K)  # blank: score 0
            new_lm = lm_nx.view(B, K * K, M)
        else:
            fused = win.no_lm + torch.where(win.is_blank, 0.0, lm_full)[:, :, None, :]
            val, col = fused.reshape(B, K, C).topk(K, dim=2)
            rank = val
            tok = col % V
            new_lm = self.scorer.gather(lm_next.view(B * K, V, M), tok.view(B * K, K)).view(B, K * K, M)
        j = col // V
        Q = K * K
        keep = expand[..., None]
        if self.gamma is not None:  # mAES's expansion threshold: near the hypothesis's best continuation only
            keep = keep & (rank >= rank[..., :1] - self.gamma)
        val = torch.where(keep, pop.score[..., None] + val, _NEG_INF).view(B, Q)
        tok, j = tok.view(B, Q), j.view(B, Q)
        src = pop.slots[:, :, None].expand(B, K, K).reshape(B, Q)  # the parent's slot
        rep = lambda x: x[:, :, None].expand(B, K, K).reshape(B, Q)  # noqa: E731
        lab = tok != self.blank
        sym = torch.where(lab, torch.where(j == 0, rep(pop.sym) + 1, 1), 0)
        time = pop.tmin + j + (~lab).long()  # a label lands on its frame, the blank after the window
        if self.max_symbols is not None:
            forced = lab & (sym >= self.max_symbols)
            time, sym = time + forced.long(), torch.where(forced, 0, sym)
        new_lm = self.scorer.where(lab, new_lm,
                                   self.scorer.select(self.lm_states, (self.flat_base + src).view(-1)).view(B, Q, M))
        return _WindArrivals(score=val, time=time, sym=sym, hash=torch.where(lab, extend_hash(rep(pop.hash), tok),
                                                                             rep(pop.hash)),
                             nlabels=rep(pop.nlabels) + lab.long(), last=torch.where(lab, tok, rep(pop.last)),
                             src=src, tok=torch.where(lab, tok, -1), frame=pop.tmin + j, lm=new_lm)

    def _wind_merge(self, pop: "_WindPop", new: "_WindArrivals") -> None:
        """Step 5: every frame list with its arrivals: merge equal transcripts, keep the ``K`` best."""
        B, K, V, S = self.B, self.K, self.V, self.S
        M = self.lm_states.shape[-1]
        keep = torch.where(pop.go & (self.slot_list == pop.r0), _NEG_INF, self.score)  # the popped list is consumed
        pool_score = torch.cat([keep, new.score], dim=1)  # [B, P]
        pool_time = torch.cat([self.time, new.time], dim=1)
        pool_sym = torch.cat([self.symbols, new.sym], dim=1)
        pool_hash = torch.cat([self.hash, new.hash], dim=1)
        pool_nl = torch.cat([self.nlabels, new.nlabels], dim=1)
        pool_last = torch.cat([self.last, new.last], dim=1)
        pool_src = torch.cat([self.slot_idx.expand(B, S), new.src], dim=1)
        pool_tok = torch.cat([torch.full((B, S), -1, dtype=torch.long, device=self.score.device), new.tok], dim=1)
        pool_frame = torch.cat([self.time, new.frame], dim=1)
        pool_lm = torch.cat([self.lm_states.view(B, S, M), new.lm], dim=1)
        merged = _merge_equal(pool_score, pool_hash, pool_time * (V + 1) + pool_last, (pool_nl, pool_time, pool_last))
        bucket = torch.remainder(self.offset + pool_time, self.R)  # [B, P]
        by_list = torch.where(bucket[:, None, :] == self.r_idx, merged[:, None, :], _NEG_INF)  # [B, R, P]
        new_score, sel = by_list.topk(K, dim=2)
        new_score, sel = new_score.view(B, S), sel.view(B, S)
        live = new_score > _NEG_INF

        parent = pool_src.gather(1, sel)
        tokens = torch.where(live, pool_tok.gather(1, sel), -1)
        parent_flat = (self.flat_base + parent).view(B * S)
        self.pred_state = self.model.select_state(self.pred_state, parent_flat)
        self.dec_proj = self.dec_proj[parent_flat]
        self.emitted = (tokens >= 0).view(B * S)
        self.labels = torch.where(tokens >= 0, tokens, self.blank).view(B * S)
        self.lm_states = self.scorer.gather(pool_lm, sel).reshape(B * S, M)
        self._record(tokens, parent, self.rule.pack_data(self.offset + pool_frame.gather(1, sel), 0))
        self.score = new_score
        self.time, self.symbols = pool_time.gather(1, sel), pool_sym.gather(1, sel)
        self.hash, self.nlabels, self.last = pool_hash.gather(1, sel), pool_nl.gather(1, sel), pool_last.gather(1, sel)
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

    def _record(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        if self.static:
            self.tree.write(tokens, parents, data)  # in place; the driver reserves and counts the step
        else:
            self.tree.record(tokens, parents, data)

    def finish(self) -> None:
        """After the last step: the tree in list form, appended to the carried tree (streaming)."""
        if not self.static:
            return
        done = self.tree.materialize()
        if self._carried_tree is not None:
            self._carried_tree.extend(done)
            done = self._carried_tree
        self.tree = done

    def predict_step(self, rows: torch.Tensor | None = None) -> None:
        """The prediction network, once for all ``B*S`` hypotheses (or only ``rows [n]``, the emitting
        ones: CPU eager); kept where a label was emitted."""
        if rows is None:
            out, st_new = self.model.predict(self.labels, self.pred_state)
            self.pred_state = self.model.replace_state(self.pred_state, st_new, self.emitted)
            self.dec_proj = torch.where(self.emitted[:, None], self.model.project_decoder(out), self.dec_proj)
            return
        out, st_new = self.model.predict(self.labels[rows], self.model.select_state(self.pred_state, rows))
        back = torch.zeros(self.labels.shape[0], dtype=torch.long, device=rows.device)
        back[rows] = torch.arange(rows.shape[0], device=rows.device)  # each row's place in the subset
        self.pred_state = self.model.replace_state(self.pred_state, self.model.select_state(st_new, back), self.emitted)
        self.dec_proj = self.dec_proj.index_copy(0, rows, self.model.project_decoder(out).to(self.dec_proj.dtype))

    # -- results ---------------------------------------------------------------------------------

    def results(self, nbest: int) -> list[list[Hypothesis]]:
        final = self.score
        if self.fused:
            final = final + self.scorer.final(self.lm_states, dtype=self.dtype).view(self.B, self.S)
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
                frames, durations = self.rule.unpack_data(data)
                row.append(Hypothesis(tokens=toks, timestamps=frames, score=float(vals_l[b][n]), durations=durations))
            out.append(row)
        return out


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
    _, by1 = torch.sort(key1.gather(1, order), dim=1, stable=True)
    order = order.gather(1, by1)
    s = score.gather(1, order)
    live = s > _NEG_INF
    same = live[:, 1:] & live[:, :-1]
    for k in (key1, key2, *check):
        k = k.gather(1, order)
        same = same & (k[:, 1:] == k[:, :-1])
    start = torch.cat([torch.ones_like(same[:, :1]), ~same], dim=1)
    seg = torch.cumsum(start.long(), dim=1) - 1  # [B, P] group of each sorted entry
    top = torch.full_like(s, _NEG_INF).scatter_reduce(1, seg, s, "amax", include_self=True).gather(1, seg)
    total = torch.zeros_like(s).scatter_add(1, seg, torch.where(live, torch.exp(s - top), 0.0)).gather(1, seg)
    pos = torch.arange(P, device=score.device).expand(B, P)
    first = torch.full_like(seg, P).scatter_reduce(1, seg, torch.where(live & (s == top), pos, P), "amin",
                                                   include_self=True).gather(1, seg)
    merged_sorted = torch.where(live & (pos == first), top + torch.log(total), _NEG_INF)
    return torch.empty_like(merged_sorted).scatter(1, order, merged_sorted)


def _static_step(loop: _BeamLoop) -> None:
    """The whole step of the static path (what torch.compile compiles and a CUDA graph captures)."""
    loop.step()
    loop.predict_step()


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
    max_symbols: int | None = DEFAULT_MAX_SYMBOLS,
    beta: float = 0.0,
    nbest: int = 1,
    tokenizer: Tokenizer | None = None,
    window: int = 8,
    expansion_gamma: float | None = None,
    state: BeamState | None = None,
    return_state: bool = False,
    final: bool | Sequence[bool] | torch.Tensor = True,
    acceleration: str | None = None,
    engine: str = "auto",
    max_symbols_per_frame: Any = _MISSING,
) -> list[list[Hypothesis]] | tuple[list[list[Hypothesis]], BeamState]:
    """Batched ALSD++ / AES++ beam search of RNN-T / TDT encoder output, with optional shallow fusion.

    Args:
        model: a :class:`TransducerModel` (TDT when ``model.durations`` is set).
        encoder_output: ``[B, T, D]`` encoder output (not projected).
        lengths: ``[B]`` valid frames per utterance (default: all ``T``).
        beam: hypotheses kept per utterance, ``1 <= beam <= model.vocab_size``.
        method: "alsd" (ALSD++, every active hypothesis expands each step), "aes" (AES++,
            frame synchronous: hypotheses on the earliest frame expand until they leave it) or
            "wind" (WIND beam search, RNN-T: per-frame hypothesis lists; the list of the earliest
            frame reads a window of ``window`` frames and its hypotheses may emit their next label
            on any of them; see :mod:`~asrdecode.transducer.reference_wind_beam`).
        fusion: ``[(FusionModel, weight), ...]`` (n-gram LMs, boosting trees) over the model's ids.
        blank_scoring: "lm_weighted" (Eq. 3 of the ALSD++ paper) or "none" (Eq. 2).
        pruning: "late" (fuse over the whole vocabulary, then select) or "early" (each
            hypothesis's ``beam`` best acoustic candidates, then fuse and select).
        max_symbols: a label that makes this many on one frame also advances one frame (as
            greedy's ``max_symbols``, default 10); None = no cap (a model that never emits blank
            then fails after ``MAX_SYMBOLS_GUARD`` labels on one frame).
        beta: bonus added to the score of every emitted label (length reward, mostly used with
            an LM); 0 by default.
        nbest: hypotheses returned per utterance (``1 <= nbest <= beam``).
        tokenizer: fills ``Hypothesis.text`` when given.
        window: WIND window (frames, ``>= 1``), used by ``method="wind"`` only; window 1 is the
            frame-by-frame search with per-frame lists.
        expansion_gamma: WIND only: each hypothesis keeps only those of its ``beam`` best
            continuations within ``expansion_gamma`` (log-score) of its best one, ranked as
            ``pruning`` ranks them (mAES's expansion threshold; fewer network calls). None (default)
            = off, the paper's Algorithm 3.
        state: the state returned for the previous chunk (streaming, RNN-T and TDT, every
            method); same batch, beam, method, window and fusion models.
        return_state: also return the :class:`BeamState` to carry into the next chunk.
        final: whether this chunk ends the utterances (one flag, or ``[B]`` flags). Before an
            utterance's last chunk pass False: a search whose next step needs frames not received
            yet waits for them, so the hypotheses after the last chunk equal whole-utterance
            decoding exactly. Chunks after an utterance's final one must have no frames for it.
        acceleration: "eager", "compile" (``torch.compile`` of the step), "cuda_graphs" (the step
            captured once and replayed; CUDA tensors), or None/"auto" (CUDA graphs on a GPU, eager
            elsewhere). The compiled and captured step is the same sync-free, static-shape step
            (the tree preallocated and written in place, the prediction network on every row);
            eager on CPU additionally runs the prediction network only for rows that emitted.
        engine: where the search bookkeeping runs: ``"native"`` (the C++ engine, CPU tensors, eager),
            ``"torch"`` (the tensor steps, any device and acceleration) or ``"auto"`` (native for CPU
            tensors and eager execution when the engine is available). Both give the same hypotheses
            (scores to float rounding) and the same streaming state, so a stream may switch engines
            between chunks.
        max_symbols_per_frame: deprecated alias of ``max_symbols`` (warns).

    Returns:
        ``B`` lists of up to ``nbest`` hypotheses, best first (fewer when merging left fewer
        distinct ones; ``[0]`` is the best), as :func:`asrdecode.ctc.beam_search` returns them.
        Scores are the summed fused log-scores plus the fusion end-of-sentence scores. Streaming: the current beam's hypotheses
        (timestamps in global frames), and the state when ``return_state``.
    """
    max_symbols = resolve_max_symbols(max_symbols, max_symbols_per_frame)
    enc, scorer, mode, beta = _check_search_args(model, encoder_output, beam, method, window, blank_scoring,
                                                 pruning, max_symbols, nbest, beta, tokenizer, fusion, acceleration)
    gamma = check_expansion_gamma(expansion_gamma, method)
    B, T, _ = enc.shape
    lengths = check_lengths(lengths, B, T, device=enc.device)
    config = (beam, method, window if method == "wind" else 1)
    final_t = _check_stream(state, final, B, config, enc.device)
    if state is None and bool(final_t.all()):  # whole utterances (or a first and last chunk)
        enc_proj, offset, received = model.project_encoder(enc), None, lengths
    else:
        enc_proj, lengths, offset, received = _chunk_buffer(model, enc, lengths, state)
    static = mode != "eager"
    native = use_native(engine, enc.device, "encoder_output", eager=not static)
    loop = _BeamLoop(model, enc_proj, lengths, beam, method, scorer, blank_scoring, pruning, max_symbols,
                     float(beta), config[2], gamma=gamma, carried=state, offset=offset, final=final_t, static=static,
                     native=native)
    if loop.B and loop.T:
        check_joint_width(model, loop.enc_proj[:1, 0], loop.dec_proj[:1])
    _drive(loop, mode, enc.device, max_symbols)
    nb = loop.results(nbest)
    for row in nb:
        attach_text(row, tokenizer)
    if not return_state:
        return nb
    return nb, _carry(loop, received, config)


def initial_beam_state(model: TransducerModel, batch: int, encoder_dim: int, *, dtype: torch.dtype | None = None,
                       **options: Any) -> BeamState:
    """A fresh stream state for ``batch`` utterances: the state of the search with ``options`` (those of
    :func:`beam_search`: beam, method, fusion, ...; checked the same way) before any frame, to pass as
    ``state=`` with the first chunk. ``encoder_dim``: the width ``D`` of the encoder output the chunks
    will have. The same as starting the stream with ``state=None``."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise DecodingInputError(f"batch must be an int >= 0, got {batch!r}")
    if isinstance(encoder_dim, bool) or not isinstance(encoder_dim, int) or encoder_dim < 1:
        raise DecodingInputError(f"encoder_dim must be an int >= 1, got {encoder_dim!r}")
    for name in ("state", "return_state", "final", "nbest", "tokenizer"):
        if name in options:
            raise DecodingInputError(f"initial_beam_state takes the search's settings only, not {name!r}")
    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    dtype = dtype or (param.dtype if param is not None else torch.float32)
    device = param.device if param is not None else torch.device("cpu")
    no_frames = torch.zeros((batch, 0, encoder_dim), dtype=dtype, device=device)
    _, st = cast("tuple[list[list[Hypothesis]], BeamState]", beam_search(
        model, no_frames, torch.zeros(batch, dtype=torch.long, device=device), state=None,
        return_state=True, final=False, **options))
    return st


def _check_search_args(model: TransducerModel, encoder_output: object, beam: int, method: str, window: int,
                       blank_scoring: str, pruning: str, max_symbols: int | None, nbest: int, beta: float,
                       tokenizer: object, fusion: Any, acceleration: str | None
                       ) -> tuple[torch.Tensor, FusionScorer, str, float]:
    """Every argument check of :func:`beam_search`; returns the encoder output, the fusion scorer, the
    acceleration mode and ``beta``."""
    check_model(model)
    enc = check_emissions("encoder_output", encoder_output, ndim=3)
    check_encoder_output(model, enc)
    check_finite("encoder_output", enc)
    wind = method == "wind"
    check_beam_args(model, beam, "aes" if wind else method, blank_scoring, pruning, max_symbols, nbest)
    if wind:
        check_window(model, window)
    beta = check_beta(beta)
    check_tokenizer(tokenizer, model)
    scorer = FusionScorer(fusion, model.vocab_size, model.blank_id)
    try:
        mode = resolve_mode(acceleration, enc.device)
    except ValueError as err:
        raise DecodingInputError(str(err)) from None
    return enc, scorer, mode, beta


def _check_stream(state: BeamState | None, final: Any, batch: int, config: tuple[int, str, int],
                  device: torch.device) -> torch.Tensor:
    """The carried state fits this call; ``final`` as ``[B]`` flags."""
    if state is not None and (len(state.tail) != batch or state.config != config):
        raise DecodingInputError(f"state is for batch {len(state.tail)} and (beam, method, window) {state.config}, "
                                 f"not batch {batch} and {config}")
    final_t = torch.as_tensor(final, dtype=torch.bool, device=device).reshape(-1)
    if final_t.numel() not in (1, batch):
        raise DecodingInputError(f"final must be one flag or {batch} flags, got {final_t.numel()}")
    return final_t.expand(batch).clone()


def _drive(loop: _BeamLoop, mode: str, device: torch.device, max_symbols: int | None) -> None:
    """Step ``loop`` until no hypothesis is active: the captured / compiled static step, or eager steps.

    Eager on CPU: the prediction network runs only for the hypotheses that emitted (none: skipped;
    one flag check). Eager on GPU, compile and CUDA graphs: every row, every step, no extra sync."""
    static = mode != "eager"
    if loop._engine is not None:
        _drive_native(loop, max_symbols)
        return
    run = StepRunner(mode, _BeamLoop.STATE)
    steps = 0
    skip_idle = device.type == "cpu" if _SKIP_IDLE_PREDICT is None else _SKIP_IDLE_PREDICT
    while bool(loop.active.any()):
        if static:
            loop.tree.reserve(1)  # host-side capacity decision: a doubled storage is re-captured
            run(_static_step, loop)
            loop.tree.advance(1)
        else:
            loop.step()
            if not skip_idle:
                loop.predict_step()
            else:
                rows = loop.emitted.nonzero().squeeze(1)
                if rows.numel():
                    loop.predict_step(None if rows.numel() == loop.emitted.numel() else rows)
        steps += 1
        if max_symbols is None and steps % 1024 == 0 and int(loop.symbols.max()) > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()
    loop.finish()


def _drive_native(loop: _BeamLoop, max_symbols: int | None) -> None:
    """Step ``loop`` on the native engine until no hypothesis is active; the prediction network runs on
    the rows that emitted (none: skipped)."""
    eng = loop._engine
    n_rows = loop.B * loop.S
    steps = 0
    while eng.num_active:
        loop.step()
        n = eng.num_emitted
        if n:
            loop.predict_step(None if n == n_rows else eng.emit_rows[:n])
        steps += 1
        if max_symbols is None and steps % 1024 == 0 and int(loop.symbols.max()) > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()


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
