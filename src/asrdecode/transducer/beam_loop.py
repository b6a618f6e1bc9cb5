"""The loop state of one batched transducer beam search call (ALSD++, AES++, WIND; torch or native engine).

:class:`BeamLoop` holds the ``[B, S]`` hypothesis tensors of a call (``S = beam``, WIND: ``(window + 1) *
beam``), the prediction-network and fusion states of every hypothesis and the backpointer tree. Its
:meth:`~BeamLoop.step` is one search step: :func:`~asrdecode.transducer.beam_alsd.alsd_step`,
:func:`~asrdecode.transducer.beam_wind.wind_step`, or the native engine's step; :meth:`~BeamLoop.predict_step`
then runs the prediction network for the hypotheses that emitted. :class:`SearchSettings` are the checked
settings of a search (one per decoder object, shared read-only by its calls).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from torch.utils._pytree import tree_flatten, tree_map

from ..accel import copy_all
from ..beam_hyps import EMPTY_HASH, BeamTree
from ..fusion import FusionScorer
from ..results import Hypothesis
from .beam_alsd import alsd_buffers, alsd_step
from .beam_state import CARRIED, BeamState
from .beam_wind import wind_buffers, wind_step
from .durations import DurationRule
from .model import TransducerModel

__all__ = ["SearchSettings"]

_NEG_INF = float("-inf")
#: steps the preallocated tree of the static path holds at first (None: ``max(64, 2 * frames)``); it doubles
_TREE_CAPACITY: int | None = None


class RoundStep:
    """The tree of a :meth:`BeamLoop.shadow`: keeps the one step a round writes, ``(tokens, parents, data)``."""

    step: tuple[torch.Tensor, torch.Tensor, torch.Tensor]

    def write(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        self.step = (tokens, parents, data)  # (BeamTree.write takes it as it is, data [B, K] or [B])


@dataclass(frozen=True)
class SearchSettings:
    """The checked settings of one beam search (see :class:`~asrdecode.transducer.BeamSearchDecoder`)."""

    beam: int
    method: str
    scorer: FusionScorer
    blank_scoring: str
    pruning: str
    max_symbols: int | None
    beta: float
    window: int  # 1 unless method == "wind"
    gamma: float | None

    @property
    def config(self) -> tuple[int, str, int]:
        """What a carried :class:`BeamState` must have been made with: (beam, method, window)."""
        return (self.beam, self.method, self.window)


class BeamLoop:
    """Loop state of one batched beam search: ``[B, S]`` tensors updated by :meth:`step`.

    With ``static=True`` (torch.compile, CUDA graphs) the tree is preallocated and written in place
    (:meth:`BeamTree.write`), and the driver's static step (step + prediction network for every row)
    is the whole step: static shapes, no host synchronisation.
    """

    #: the attributes a step replaces or writes (for CUDA graphs: the static buffers); most are written in
    #: place (``out=``), the tree too
    STATE = ("score", "fields", "pred_state", "dec_proj", "lm_states", "emitted", "labels", "active", "running",
             "busy", "tree")
    #: the integer fields of a hypothesis, rows of :attr:`fields` ``[F, B, S]`` (the first four identify a
    #: transcript on a frame: the merge key); each is also an attribute, a view of its row
    FIELDS = ("time", "hash", "nlabels", "last", "symbols")

    def __init__(
        self,
        model: TransducerModel,
        enc_proj: torch.Tensor,
        lengths: torch.Tensor,
        settings: SearchSettings,
        carried: BeamState | None = None,
        offset: torch.Tensor | None = None,
        final: torch.Tensor | None = None,
        static: bool = False,
        native: bool = False,
        capacity: int | None = None,
    ) -> None:
        B, T, _ = enc_proj.shape
        dev = enc_proj.device
        self.model, self.B, self.K, self.T = model, B, settings.beam, T
        self._init_settings(model, settings, dev)
        self.dtype = enc_proj.dtype
        self.enc_proj = enc_proj  # [B, T, H]
        self.lengths = lengths[:, None]  # [B, 1]
        # final=None: whole utterances (no chunk waits for frames to come)
        self.streaming = final is not None
        self.final = torch.ones((B, 1), dtype=torch.bool, device=dev) if final is None else final[:, None]
        big = torch.iinfo(torch.long).max
        # a TDT jump past the end stops at the end; before the last chunk it is kept (next chunk)
        self.time_cap = torch.where(self.final, self.lengths, big)  # [B, 1]
        self.offset = (torch.zeros(B, dtype=torch.long, device=dev) if offset is None else offset)[:, None]
        self._init_indices(dev)
        self._init_hypotheses(carried is None, dev)
        self.static = static
        if static and self.fused and B:  # the fusion models' lazy tables built now, eagerly: a compiled round
            self.scorer.advance(self.lm_states[:1], dtype=self.dtype)  # would trace building them every round
        cap = _TREE_CAPACITY if _TREE_CAPACITY is not None else max(64, 2 * T, capacity or 0)
        self.tree = BeamTree.preallocated(B, self.S, dev, capacity=cap) if static else BeamTree()
        self._carried_tree: BeamTree | None = None
        if carried is not None:
            for name in CARRIED:
                if name in self.FIELDS:
                    getattr(self, name).copy_(carried.hyps[name])
                else:
                    setattr(self, name, carried.hyps[name])
            if static:
                self._carried_tree = carried.tree
            else:
                self.tree = carried.tree
        self.active = self._expanding()
        self.running = self.active.any()  # 0-dim: some hypothesis can step (``done`` is its negation)
        # the native engine runs the steps' bookkeeping (the networks stay torch calls)
        self.native = native and not static
        if not self.wind:
            alsd_buffers(self)
        elif not self.native:  # (the native WIND step keeps its own buffers)
            wind_buffers(self)
        self.busy = torch.zeros((), dtype=torch.long, device=dev)  # rounds run before ``done`` (not the overshoot)
        self._engine: Any = None
        if self.native:
            from ..native.transducer_beam import NativeBeamStep
            from ..native.transducer_wind import NativeWindStep

            self._enc_rows = enc_proj.reshape(B * T, enc_proj.shape[-1])  # [B*T, H]: row b * T + frame
            self._engine = NativeWindStep(self, self.scorer) if self.wind else NativeBeamStep(self, self.scorer)

    def _init_settings(self, model: TransducerModel, s: SearchSettings, dev: torch.device) -> None:
        """The search's settings as the steps read them (durations, method flags, fusion weights)."""
        self.V, self.blank = model.vocab_size, model.blank_id
        self.rule = DurationRule.of(model)  # advance rule and tree data = frame * pack + duration
        self.tdt = self.rule.tdt
        self.D = len(self.rule.values)
        self.dvals = torch.tensor(self.rule.values, dtype=torch.long, device=dev)
        self.wind = s.method == "wind"
        self.aes = s.method in ("aes", "wind")  # both expand only the hypotheses on the earliest frame
        self.window = s.window
        self.gamma = s.gamma  # WIND's expansion threshold (None: off)
        self.win = torch.arange(s.window, device=dev)
        self.early = s.pruning == "early"
        self.scorer = s.scorer
        self.scorer.watch_on(dev)  # (a user fusion model's flag, made before any capture)
        self.fused = s.scorer.num_models > 0
        self.lam = float(sum(s.scorer.weights))
        self.lm_weighted = s.blank_scoring == "lm_weighted" and self.lam != 0.0
        self.beta = float(s.beta)
        self.max_symbols = s.max_symbols
        # every fusion model keeps its state on the blank (its blank column is the identity): the next fusion
        # state of any selection is then one gather of ``advance``'s next states at the hypothesis's label
        self.lm_blank_identity = all(getattr(m, "blank_id", None) == model.blank_id for m in s.scorer.models)

    def reset(self, enc_proj: torch.Tensor, lengths: torch.Tensor) -> None:
        """Start a new whole-utterance search in this loop's buffers, in place (a cached static loop: the
        captured graphs read these addresses): ``enc_proj [b, t, H]`` (``b <= B``, ``t <= T``) and
        ``lengths [b]`` are copied in, the rows and frames past them padded (padded rows: length 0)."""
        b, t = enc_proj.shape[0], enc_proj.shape[1]
        self.enc_proj.zero_()
        self.enc_proj[:b, :t].copy_(enc_proj)
        self.lengths.zero_()
        self.lengths[:b, 0].copy_(lengths)
        self.time_cap.copy_(torch.where(self.final, self.lengths, torch.iinfo(torch.long).max))
        fresh = self._fresh
        assert fresh is not None, "reset() needs a loop made for fresh searches"
        self.score.fill_(_NEG_INF)
        self.score[:, 0] = 0.0
        self.fields.zero_()
        self.emitted.zero_()
        self.hash.fill_(EMPTY_HASH)
        self.last.fill_(self.blank)
        self.labels.fill_(self.blank)
        for dst, src in zip(tree_flatten(self.pred_state)[0], tree_flatten(fresh[0])[0]):
            dst.copy_(src)
        self.dec_proj.copy_(fresh[1])
        self.lm_states.copy_(fresh[2])
        self._expanding(out=self.active)
        torch.any(self.active, out=self.running)
        self.busy.zero_()
        self.tree.clear()

    def _init_indices(self, dev: torch.device) -> None:
        """Slot layout: ``S = K`` slots per utterance; WIND: a ring of ``window + 1`` frame lists of ``K``
        (slot ``r * K + k`` holds a hypothesis whose global frame is ``r`` modulo ``window + 1``)."""
        B, K = self.B, self.K
        self.R = self.window + 1 if self.wind else 1
        S = self.S = self.R * K
        self.b_idx = torch.arange(B, device=dev)[:, None]  # [B, 1]
        self.flat_base = (torch.arange(B, device=dev) * S)[:, None]  # [B, 1]
        self.k_idx = torch.arange(K, device=dev)[None, :]  # [1, K]
        self.r_idx = torch.arange(self.R, device=dev)[None, :, None]  # [1, R, 1]
        self.slot_idx = torch.arange(S, device=dev)[None, :]  # [1, S]
        self.slot_list = self.slot_idx // K  # [1, S]: the frame list of each slot
        self.minus_one = torch.full((1, 1), -1, dtype=torch.long, device=dev)  # "no token" (WIND's pool)
        self.tri = torch.arange(K, device=dev)[None, :] < torch.arange(K, device=dev)[:, None]  # [K, K]: j < i
        # 0-dim constants for the steps' ``torch.where(..., out=)`` (which takes tensors only)
        self.neg_inf = torch.full((), _NEG_INF, dtype=self.dtype, device=dev)
        self.blank_t = torch.full((), self.blank, dtype=torch.long, device=dev)

    def _init_hypotheses(self, fresh: bool, dev: torch.device) -> None:
        """The start of a search: one empty hypothesis per utterance (slot 0), fusion states; with
        ``fresh``, the blank-primed prediction-network state of every slot (else it is carried)."""
        B, S, model = self.B, self.S, self.model
        N = B * S
        self.score = torch.full((B, S), _NEG_INF, dtype=self.dtype, device=dev)
        self.score[:, 0] = 0.0
        self.fields = torch.zeros((len(self.FIELDS), B, S), dtype=torch.long, device=dev)
        self._rows = self.fields.unbind(0)  # the field views, made once (no op per read)
        self.merge_key = self.fields[:4]  # [4, B, S]: time, hash, nlabels, last (equal transcripts on a frame)
        self.hash.fill_(EMPTY_HASH)
        self.last.fill_(self.blank)
        if fresh:  # every slot starts from the same blank-primed state: one row computed, then copied
            dec, first = model.predict(torch.full((1,), self.blank, dtype=torch.long, device=dev),
                                       model.initial_state(1, device=dev, dtype=self.dtype))
            same = torch.zeros(N, dtype=torch.long, device=dev)
            self.pred_state = model.select_state(first, same)
            self.dec_proj = model.project_decoder(dec).index_select(0, same)  # [N, H]
        # per-utterance models (stacked boosting trees) get the utterance of each hypothesis;
        # a single tree serves every utterance
        stacked = any(int(getattr(m, "num_trees", 1)) > 1 for m in self.scorer.models)
        utt = torch.arange(B, device=dev).repeat_interleave(S) if stacked else None
        self.lm_states = self.scorer.initial(N, dev, utterances=utt)  # [N, M]
        self.emitted = torch.zeros(N, dtype=torch.bool, device=dev)
        self.labels = torch.full((N,), self.blank, dtype=torch.long, device=dev)
        # what :meth:`reset` restores (fresh searches only)
        self._fresh = ((tree_map(torch.clone, self.pred_state), self.dec_proj.clone(), self.lm_states.clone())
                       if fresh else None)

    def twin(self) -> "BeamLoop":
        """An independent copy of the loop's state (its own tensors, views of them kept views of the copies;
        the same model, fusion models and settings): for lockstep tests that run a round both ways from the
        same state (tests/lockstep.py)."""
        memo: dict[int, Any] = {id(self.model): self.model, id(self.scorer): self.scorer, id(self._engine): self._engine}
        return copy.deepcopy(self, memo)

    def shadow(self) -> tuple["BeamLoop", "RoundStep"]:
        """A copy for a pure round (:class:`~asrdecode.accel.PureStep`, what torch.compile traces): the same
        settings, model and inputs, its own copies of the state tensors (their views remade), its own step
        buffers, and as its tree a :class:`RoundStep` (returned too) that keeps the round's step instead of
        writing it, so a round on the copy writes no tensor of this loop."""
        sh = copy.copy(self)
        for name in self.STATE:
            if name != "tree":
                setattr(sh, name, tree_map(torch.clone, getattr(self, name)))
        sh._rows = sh.fields.unbind(0)
        sh.merge_key = sh.fields[:4]
        if self.wind:
            wind_buffers(sh)
        else:
            alsd_buffers(sh)
        step = RoundStep()
        sh.tree = step  # type: ignore[assignment]  # (a static loop's tree is only written: RoundStep.write)
        return sh, step

    def state_values(self) -> tuple:
        """The :attr:`STATE` values but the tree, in order (a pure round's result)."""
        return tuple(getattr(self, name) for name in self.STATE if name != "tree")

    def write_state(self, values: tuple, step: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        """Copy a pure round's :meth:`state_values` into this loop's tensors (in place: fixed addresses) and
        write its tree step."""
        names = [name for name in self.STATE if name != "tree"]
        copy_all(tree_flatten([getattr(self, name) for name in names])[0], tree_flatten(list(values))[0])
        self.tree.write(*step)

    # the fields as attributes: views of their rows of ``fields`` (never replaced: the steps write ``fields``
    # in place), assigned by copying into the row
    time = property(lambda self: self._rows[0], lambda self, x: self._rows[0].copy_(x))
    hash = property(lambda self: self._rows[1], lambda self, x: self._rows[1].copy_(x))
    nlabels = property(lambda self: self._rows[2], lambda self, x: self._rows[2].copy_(x))
    last = property(lambda self: self._rows[3], lambda self, x: self._rows[3].copy_(x))
    symbols = property(lambda self: self._rows[4], lambda self, x: self._rows[4].copy_(x))

    @property
    def _selected_ok(self) -> torch.Tensor:
        """``[B, K]``: the last ALSD / AES step's selections that had a finite score (before merging; tests)."""
        ok = self.__dict__.get("_native_ok")
        return ok if ok is not None else self.__dict__["_sel_val"] > _NEG_INF

    @property
    def done(self) -> torch.Tensor:
        """0-dim: no hypothesis can step (the device loop's flag)."""
        return ~self.running

    def _expanding(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, K]`` (``[B, 1]`` WIND; written into ``out`` when given): the hypotheses the next step expands.

        ALSD: every active one; AES / WIND: the active ones on the earliest frame. Before the last
        chunk (``final=False``) an utterance whose next step needs frames not received yet pauses:
        ALSD when a hypothesis has reached the chunk end, WIND when the window passes it (AES never
        reads past the earliest frame), so chunked decoding takes the whole-utterance steps.
        """
        valid = self.score > _NEG_INF
        time = self.time
        if not self.aes and not self.streaming:
            return torch.logical_and(valid, time < self.lengths, out=out)
        active = valid & (time < self.lengths)
        if not self.aes:
            wait = ~(valid & (time >= self.lengths)).any(dim=1, keepdim=True)
            return torch.logical_and(active, self.final | wait, out=out)
        if self.wind and not self.streaming:
            return torch.any(active, dim=1, keepdim=True, out=out)
        big = torch.iinfo(torch.long).max
        tmin = torch.where(active, time, big).min(dim=1, keepdim=True).values
        if self.wind:  # [B, 1]: the utterances whose next step pops their earliest frame's list
            go = self.final | (tmin + self.window <= self.lengths)
            return torch.logical_and(active.any(dim=1, keepdim=True), go, out=out)
        return torch.logical_and(active, time == tmin, out=out)

    # -- one step: expand, select, merge, update ---------------------------------------------

    def round(self) -> None:
        """One round of the device loop (torch engine): a step, the prediction network on every row, the
        done flag. Static shapes, no host read; a finished loop is unchanged by it (every hypothesis is
        carried, its slot order aside; the tree records a step of no tokens)."""
        self.busy.add_(self.running)
        self.step()
        self.predict_step()
        torch.any(self.active, out=self.running)

    def step(self) -> None:
        """One search step (native engine, WIND, or ALSD++ / AES++)."""
        if self._engine is not None:
            self._native_wind_step() if self.wind else self._native_step()
        elif self.wind:
            wind_step(self)
        else:
            alsd_step(self)

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
        self._native_ok = eng.selected_ok

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

    def results(self, nbest: int, rows: int | None = None) -> list[list[Hypothesis]]:
        """The ``nbest`` best hypotheses of each utterance (of the first ``rows``: a padded cached loop)."""
        B = self.B if rows is None else rows
        final = self.score[:B]
        if self.fused:
            final = final + self.scorer.final(self.lm_states, dtype=self.dtype).view(self.B, self.S)[:B]
        vals, slots = final.topk(nbest, dim=1)
        slots = torch.where(vals > _NEG_INF, slots, -1)
        if B < self.B:  # padded rows: no hypothesis to backtrack
            slots = torch.cat([slots, slots.new_full((self.B - B, nbest), -1)])
        seqs = self.tree.backtrack(slots)
        vals_l = vals.tolist()
        out: list[list[Hypothesis]] = []
        for b in range(B):
            row = []
            for n in range(nbest):
                if vals_l[b][n] == _NEG_INF:
                    continue
                toks, data = seqs[b][n]
                frames, durations = self.rule.unpack_data(data)
                row.append(Hypothesis(tokens=toks, timestamps=frames, score=float(vals_l[b][n]), durations=durations))
            out.append(row)
        return out

