"""Batched greedy decoding for RNN-T and TDT: label-looping (with WIND windows) and frame-looping.

Both loops are exact: for every utterance they take the same decisions as
:func:`~asrdecode.transducer.reference.reference_greedy` (Algorithm 1 of the label-looping paper),
whatever the batch composition, and so return the same tokens, timestamps, TDT durations and
scores (same scoring rule, see the reference module).

RNN-T and TDT share one loop: they differ only in how far time advances after a decision
(RNN-T: blank 1, label 0; TDT: the predicted duration value, a blank at least 1).

- ``loop="labels"`` (label-looping, Algorithm 3 of the paper): the outer loop emits one label
  per utterance per step and runs the prediction network once for the batch; the inner loop
  consumes blanks for the utterances still looking for their next label. With ``window=w``
  (WIND, RNN-T) the inner loop evaluates the joint on ``w`` frames at once and jumps to the
  first non-blank frame.
- ``loop="frames"`` (Algorithm 2 of the paper, the baseline): the outer loop walks frames; all
  utterances on that frame take decisions together; the labels are emitted with one prediction
  network step for the whole batch, its results kept only where a label was emitted.

The loops stay on the device (DESIGN rule 3): a call is rounds of sync-free, masked steps driven by
:func:`~asrdecode.accel.run_until_done`, which reads the ``done`` flag on the host only at O(log) check
points (a round run past the end changes nothing). A label-looping round is find steps (the joint only,
for the rows still searching) and one emit step for the rows that found their label (the prediction
network runs once for the batch, its output kept where emitted); its shape is chosen by kernels per call
(a replayed graph costs its kernel launches): RNN-T eager :data:`FIND_STEPS` single-frame steps, RNN-T
in a static loop one :data:`FIND_FRAMES`-frame window step, WIND one ``w``-frame window step, TDT one
decision per round. A frame-looping round is one decision of the rows on the earliest active frame plus
its emit step. Each row's decisions are Algorithm 1's whatever the round shape. The steps update the
loop's tensors in place (masked ``out=`` writes: a captured graph copies nothing back); a decision's
log-prob comes from one ``log_softmax`` (``logsumexp`` is nine GPU kernels). Hypothesis storage is reserved
on the host between round batches; ``max_symbols=None``'s runaway guard is a device flag read after the
loop. Eager mode runs on the call's tensors; ``"compile"`` / ``"cuda_graphs"`` run a static loop cached
on the :class:`GreedyDecoder` per (B, T) :func:`~asrdecode.accel.bucket` (padded rows have length 0), so
a warm call replays its graphs. Streaming: :class:`GreedyDecoder`'s ``init_state`` / ``advance`` (per
chunk) / ``finalize``; the final hypotheses equal whole-utterance decoding.

``engine="native"`` runs whole-utterance decoding in C++ (:mod:`asrdecode.native.transducer_greedy_lstm`:
LSTMTransducer and sherpa-onnx ONNX weights), with the same decisions; ``"auto"`` picks it on CPU
where it applies (streaming ``advance`` stays on the tensor engine).
"""

from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..accel import (LoopCache, LoopStats, StepRunner, bucket, compiles, mark_lengths_dynamic, parameters_key,
                     resolve_mode, run_until_done)
from ..configs import TransducerGreedyConfig, takes_config
from ..errors import DecodingInputError, check_emissions, check_finite, check_int, check_lengths
from ..hyps import BatchedHyps
from ..native.choice import native_fit
from ..results import Hypothesis, Tokenizer, attach_text
from .durations import DurationRule
from .model import TransducerModel, check_joint_width, check_model, checked_joint, replace_state_inplace
from . import _checks
from ._checks import check_encoder_output, check_tokenizer

__all__ = ["greedy", "GreedyState", "GreedyDecoder"]

_LOOPS = ("labels", "frames")


@dataclass
class GreedyState:
    """What greedy decoding carries from one chunk of encoder output to the next.

    Attributes:
        pred_state: prediction-network state (model pytree), batch ``B``.
        dec_out: ``[B, P]`` prediction-network output for the last emitted label.
        skip: ``[B]`` frames of the next chunk already covered (a TDT jump past the chunk end).
        offset: ``[B]`` global index of the next chunk's first frame.
        hyps: the hypotheses so far (timestamps in global frames).
    """

    pred_state: Any
    dec_out: torch.Tensor
    skip: torch.Tensor
    offset: torch.Tensor
    hyps: BatchedHyps

    @classmethod
    def initial(cls, model: TransducerModel, batch: int, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> "GreedyState":
        """The state of ``batch`` fresh streams (start of sequence): :meth:`GreedyDecoder.init_state`."""
        check_model(model)
        return _initial_state(model, batch, 8, torch.empty(0, device=device, dtype=dtype))

    @classmethod
    def join(cls, states: Sequence["GreedyState"], /, *, pred_state: Any = None) -> "GreedyState":
        """One batch state of ``states`` (their rows in order); ``pred_state``: the batch's prediction-network
        state (model pytree; the streams keep theirs outside, as
        :class:`~asrdecode.streaming.state_batching.StatePool` does), required."""
        if pred_state is None:
            raise DecodingInputError("GreedyState.join needs pred_state=, the batch's prediction-network state "
                                     "(StatePool.gather)")
        return cls(pred_state=pred_state, dec_out=torch.cat([s.dec_out for s in states]),
                   skip=torch.cat([s.skip for s in states]), offset=torch.cat([s.offset for s in states]),
                   hyps=BatchedHyps.join([s.hyps for s in states]))

    def split_into(self, states: Sequence["GreedyState"], /) -> Any:
        """Give each of ``states`` (those :meth:`join` joined) its rows of this batch state; returns the batch's
        prediction-network state, which the states do not hold (their ``pred_state`` is set to None)."""
        row = 0
        for st in states:
            n = st.dec_out.shape[0]
            st.pred_state, st.dec_out = None, self.dec_out[row:row + n].clone()
            st.skip, st.offset = self.skip[row:row + n].clone(), self.offset[row:row + n].clone()
            st.hyps = self.hyps.rows(row, row + n)
            row += n
        return self.pred_state


#: find steps per RNN-T label-looping round of the eager loop (joint only) before the round's emit step
#: (prediction network): a row's next label is usually found within a round, and a round's prediction
#: runs at most once per ``k`` joints; each row's decisions are Algorithm 1's whatever the round shape
FIND_STEPS = 2
#: frames per find step of RNN-T label-looping in a static loop (compile / CUDA graphs): one find step per
#: round evaluates the joint on this many frames at once and consumes the leading blanks (WIND's window
#: step, exact for RNN-T). On a GPU a round costs its kernel launches, not its rows: 4 frames take ~0.75x
#: the kernels of two single-frame steps and cover the blank runs of a ~0.3 labels / frame model in ~0.8x
#: the rounds (paper model, B=32: 139 rounds of 47 kernels against 178 of 58); on a CPU the joint's
#: arithmetic dominates and the eager loop keeps FIND_STEPS single-frame steps
FIND_FRAMES = 4
#: rounds per frame of a first call (the first flag check); later calls use the observed rate
_FIRST_ROUNDS_PER_FRAME = {"labels": 0.6, "wind": 0.3, "frames": 1.5}


class _Loop:
    """Loop state of one greedy call: tensors only, updated in place by the step functions (fixed
    addresses: a captured graph copies nothing back).

    Shapes: ``B`` rows (a static loop: the padded batch), ``T`` frames, ``H`` joint width. Per row: ``t``
    the current frame (chunk frames; the offsets are added to the timestamps after the loop); ``active``
    the rows that still decide: ``t < lengths`` at the start of a round (label-looping: a row that found
    its label stops until the round's emit step); ``symbols`` labels on the current frame;
    ``pending_label`` / ``pending_dur`` the label found (TDT: its duration index). 0-dim: ``busy`` (a row
    was active after the last round: the loop's flag is its negation), ``live`` (rounds started busy),
    ``runaway`` and ``frame`` (frame-looping's current frame). The encoder output carries ``pad`` zero
    frames past ``T``, so the joint reads frame ``t`` of a finished row (``t`` up to ``T - 1 +`` the
    largest duration or window) without a clamp.
    """

    # the steps' state (the CUDA-graph in-place wrapper's names; every tensor is updated in place)
    STATE = (
        "t", "active", "found", "symbols", "pending_label", "pending_dur", "frame", "busy", "runaway", "live",
        "dec_out", "dec_proj", "pred_state", "hyps",
    )  # fmt: skip

    def __init__(self, model: TransducerModel, enc: torch.Tensor, lengths: torch.Tensor, state: GreedyState,
                 window: int, max_symbols: int | None, precompute: bool, static: bool = False) -> None:
        B, T, _ = enc.shape
        dev = enc.device
        self.model = model
        self.V = model.vocab_size
        self.blank = model.blank_id
        self.rule = DurationRule.of(model)
        self.tdt = self.rule.tdt
        values = torch.tensor(self.rule.values, device=dev)
        #: duration index -> frames a label / a blank advances (TDT)
        self.label_steps, self.blank_steps = values, values.clamp(min=1)
        self.max_symbols = max_symbols
        #: labels on one frame past which a ``max_symbols=None`` search is a runaway (None: capped search)
        self.guard = _checks.MAX_SYMBOLS_GUARD if max_symbols is None else None
        self.precompute = precompute
        self.T = T
        self.t_end = torch.full((), T, dtype=torch.long, device=dev)  # T as a tensor (a compiled step reads it)
        self.window = window
        self.find_steps, self.find_frames = _round_shape(window, self.tdt, static)
        self.b_idx = torch.arange(B, device=dev)
        self.win = torch.arange(self.find_frames, device=dev)
        #: window find steps: per row, the labels of the window (column ``w``: always one, the end)
        self.stop = torch.ones(B, self.find_frames + 1, dtype=torch.uint8, device=dev)
        self.found = torch.zeros(B, dtype=torch.bool, device=dev)  # window find steps: a label found
        pad = max(self.find_frames, max(self.rule.values), 1)
        enc = model.project_encoder(enc) if precompute else enc
        self.enc = torch.cat([enc, enc.new_zeros(B, pad, enc.shape[2])], dim=1)
        #: window find steps: frames ``t .. t + w - 1`` of every ``t``, a view ``[B, T + pad - w + 1, w, H]``
        self.enc_windows = self.enc.unfold(1, self.find_frames, 1).transpose(2, 3)
        self.lengths = lengths
        self.offset = state.offset
        self.hyps = state.hyps
        self.start = state.hyps.lengths.clone()  # the labels before this call (their timestamps are final)
        # the loop's own copies: updated in place, the caller's state stays as it was
        self.pred_state = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, state.pred_state)
        self.dec_out = state.dec_out.clone()
        self.dec_proj = model.project_decoder(self.dec_out) if precompute else self.dec_out
        self.t = state.skip.clone()
        self.active = self.t < lengths
        self.symbols = torch.zeros(B, dtype=torch.long, device=dev)
        self.pending_label = torch.full((B,), self.blank, dtype=torch.long, device=dev)
        self.pending_dur = torch.zeros(B, dtype=torch.long, device=dev)
        self.runaway = torch.zeros((), dtype=torch.bool, device=dev)
        self.live = torch.zeros((), dtype=torch.long, device=dev)  # rounds that found work
        self.frame = _current_frame(self)
        self.busy = self.active.any()

    def load(self, enc: torch.Tensor, lengths: torch.Tensor, state: GreedyState) -> None:
        """Copy one call's inputs into this (static, padded) loop's buffers and reset the loop in place:
        ``enc [b, T', D]`` with ``b <= B``, ``T' <= T`` (rows past ``b`` get length 0), its ``lengths [b]``
        and ``state`` (batch ``b``). No tensor is replaced: captured graphs stay valid."""
        b, T = enc.shape[:2]
        model = self.model
        self.enc[:b, :T].copy_(model.project_encoder(enc) if self.precompute else enc)
        self.lengths.zero_()
        self.lengths[:b].copy_(lengths)
        self.offset.zero_()
        self.offset[:b].copy_(state.offset)
        self.t.zero_()
        self.t[:b].copy_(state.skip)
        self.dec_out[:b].copy_(state.dec_out)
        self.dec_proj.copy_(model.project_decoder(self.dec_out) if self.precompute else self.dec_out)
        rows = self.b_idx.clamp(max=b - 1)  # padded rows: copies of the last real row (length 0, never read)
        for mine, given in zip(tree_flatten(self.pred_state)[0], tree_flatten(model.select_state(state.pred_state, rows))[0]):
            mine.copy_(given)
        self.active.copy_(self.t < self.lengths)
        self.symbols.zero_()
        self.pending_label.fill_(self.blank)
        self.pending_dur.zero_()
        self.found.zero_()
        self.runaway.zero_()
        self.live.zero_()
        self.frame.copy_(_current_frame(self))
        self.busy.copy_(self.active.any())
        self.hyps.reset()
        self.start.zero_()

    # -- the joint after projection, and one decision per row ----------------------------------

    def joint_at(self, frames: torch.Tensor, window: bool = False) -> torch.Tensor:
        """Logits ``[B, V']`` at ``frames [B]`` (within the padded encoder output) for the current labels;
        ``window``: ``[B, w, V']`` at frames ``frames .. frames + w - 1`` (one gather of the window view)."""
        dec = self.dec_proj
        if window:
            enc = self.enc_windows[self.b_idx, frames]
            dec = dec.unsqueeze(1)
        else:
            enc = self.enc[self.b_idx, frames]
        if not self.precompute:
            enc = self.model.project_encoder(enc)
            dec = self.model.project_decoder(dec)
        return checked_joint(self.model, enc, dec)

    def decide(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Greedy decision per row: (label, log-prob of the decision, TDT duration index or None). The
        argmax of the logits (the reference's argmax of their log-softmax); the log-prob from one
        log-softmax (one kernel; ``logsumexp`` is nine on a GPU)."""
        tok = logits[..., : self.V] if self.tdt else logits
        label = tok.argmax(dim=-1)
        logp = torch.log_softmax(tok, dim=-1).gather(-1, label.unsqueeze(-1)).squeeze(-1)
        if not self.tdt:
            return label, logp.to(self.hyps.scores.dtype), None
        dur = logits[..., self.V :]
        didx = dur.argmax(dim=-1)
        logp = logp + torch.log_softmax(dur, dim=-1).gather(-1, didx.unsqueeze(-1)).squeeze(-1)
        return label, logp.to(self.hyps.scores.dtype), didx

    def consume(self, blank: torch.Tensor, didx: torch.Tensor | None) -> None:
        """Rows where ``blank`` consume their blank decision (duration index ``didx``, TDT): time advances
        and the frame's label count restarts."""
        self.t.add_(blank if didx is None else torch.where(blank, self.blank_steps[didx], 0))  # RNN-T: 1
        self.symbols.masked_fill_(blank, 0)


def _emit(lp: _Loop, emit: torch.Tensor, label: torch.Tensor, didx: torch.Tensor | None) -> None:
    """Append ``label`` where ``emit`` (its log-prob is already in the score), advance time by the label
    rule, update the prediction network (run for every row, kept where ``emit``: static shapes); then
    ``active`` is ``t < lengths``. In place."""
    hyps = lp.hyps
    # every row writes at its length: < capacity, as _run_loop reserves a column per round (and one past
    # the most labels the call can emit); only emitting rows count it
    pos = hyps.lengths.unsqueeze(1)  # (a view: the writes come before the lengths move)
    hyps.tokens.scatter_(1, pos, label.unsqueeze(1))
    hyps.timestamps.scatter_(1, pos, lp.t.unsqueeze(1))
    dur = None
    if didx is not None:
        dur = lp.label_steps[didx]
        hyps.durations.scatter_(1, pos, dur.unsqueeze(1))  # type: ignore[union-attr]  # TDT hypotheses
    hyps.lengths.add_(emit)
    lp.symbols.add_(emit)
    if dur is not None:  # TDT: the label's duration moves time on (its frame's count restarts)
        advance = torch.where(emit, dur, 0)
        lp.symbols.masked_fill_(advance > 0, 0)
        if lp.max_symbols is not None:  # the max_symbols-th label on a frame moves time on
            forced = lp.symbols >= lp.max_symbols
            advance.add_(forced)
            lp.symbols.masked_fill_(forced, 0)
        lp.t.add_(advance)
    elif lp.max_symbols is not None:  # an RNN-T label stays on its frame unless it is the max_symbols-th
        forced = lp.symbols >= lp.max_symbols  # (only a row that emitted now can reach it)
        lp.t.add_(forced)
        lp.symbols.masked_fill_(forced, 0)
    # every row's label goes in (found labels are vocabulary ids): the outputs are kept where emitted
    dec_out, new_state = lp.model.predict(label, lp.pred_state)
    replace_state_inplace(lp.model, lp.pred_state, new_state, emit)
    keep = emit.unsqueeze(1)
    torch.where(keep, dec_out, lp.dec_out, out=lp.dec_out)
    if lp.precompute:  # (else dec_proj is dec_out)
        torch.where(keep, lp.model.project_decoder(dec_out), lp.dec_proj, out=lp.dec_proj)
    torch.lt(lp.t, lp.lengths, out=lp.active)


def _current_frame(lp: _Loop) -> torch.Tensor:
    """Frame-looping's frame: the earliest frame of an active row (0-dim; ``T`` when none is active)."""
    return torch.where(lp.active, lp.t, lp.t_end).amin() if lp.t.numel() else lp.t.new_zeros(())


def _finish_round(lp: _Loop) -> None:
    """The loop's flag after a round: busy while a row is active and (``max_symbols=None``) no row went past
    the guard's labels on one frame (the caller raises, as the reference does)."""
    lp.live.add_(lp.busy)
    torch.any(lp.active, out=lp.busy)
    if lp.guard is not None:
        torch.logical_or(lp.runaway, (lp.symbols > lp.guard).any(), out=lp.runaway)
        lp.busy.logical_and_(~lp.runaway)


def _stamp_offsets(lp: _Loop) -> None:
    """After the loop: the call's labels were stamped with chunk frames; add each row's chunk offset."""
    hyps = lp.hyps
    later = torch.arange(hyps.capacity, device=lp.t.device) >= lp.start.unsqueeze(1)
    hyps.timestamps.add_(torch.where(later, lp.offset.unsqueeze(1), 0))


# -- label-looping: rounds of find steps (joint only) and an emit step (prediction network) -------------


def _round_shape(window: int, tdt: bool, static: bool) -> tuple[int, int]:
    """(find steps per label-looping round, frames per find step): WIND one window step; TDT one decision
    per round (its label emitted at once: a second find step costs more kernels than the rounds it saves,
    paper model); RNN-T one :data:`FIND_FRAMES`-frame step in a static loop, else :data:`FIND_STEPS`
    single-frame steps."""
    if window > 1:
        return 1, window
    if tdt:
        return 1, 1
    return (1, FIND_FRAMES) if static else (FIND_STEPS, 1)


def _decide_and_emit(lp: _Loop, deciding: torch.Tensor) -> None:
    """One decision for the rows ``deciding`` (at their frame ``t``): blanks are consumed, labels emitted
    (one prediction-network step for the batch). Each decision's log-prob goes into the score."""
    label, logp, didx = lp.decide(lp.joint_at(lp.t))
    is_blank = label == lp.blank
    lp.hyps.scores.add_(torch.where(deciding, logp, 0))
    lp.consume(deciding & is_blank, didx)
    _emit(lp, deciding > is_blank, label, didx)


def _find_label_step(lp: _Loop) -> None:
    """One decision for every row still searching (active): consume a blank (time advances) or keep the
    label for the round's emit step (RNN-T and TDT). Each decision's log-prob goes into the score now (a
    label found is always emitted by the round's emit step). Other rows stay put."""
    label, logp, didx = lp.decide(lp.joint_at(lp.t))
    act = lp.active
    blank = (label == lp.blank) & act
    lp.hyps.scores.add_(torch.where(act, logp, 0))
    lp.consume(blank, didx)
    torch.where(act, label, lp.pending_label, out=lp.pending_label)
    if didx is not None:
        torch.where(act, didx, lp.pending_dur, out=lp.pending_dur)
    torch.logical_and(blank, lp.t < lp.lengths, out=lp.active)


def _find_label_window_step(lp: _Loop) -> None:
    """A round's one find step over ``w`` frames (WIND's window step, RNN-T): evaluate the joint on frames
    ``t .. t + w - 1``, consume the leading blanks below the length, keep the first label (``found``,
    ``pending_label``). Every row within its length searches (the step follows an emit step)."""
    w = lp.find_frames
    label, logp, _ = lp.decide(lp.joint_at(lp.t, window=True))  # [B, w]
    reach = (lp.lengths - lp.t).clamp_(0, w)  # [B]: the window's frames below the length
    if torch.compiler.is_compiling():  # (Dynamo breaks the graph at a non-contiguous out=)
        lp.stop[:, :w].copy_(label != lp.blank)
    else:
        torch.ne(label, lp.blank, out=lp.stop[:, :w])  # (column w: always 1)
    first = lp.stop.argmax(dim=1)  # [B]: the window's first label (w: none)
    torch.lt(first, reach, out=lp.found)  # a label below the length: emitted by the round's emit step
    n_blank = torch.minimum(first, reach)  # the leading blanks below the length
    lp.t.add_(n_blank)
    lp.symbols.masked_fill_(n_blank > 0, 0)  # the frame's label count restarts where a blank was consumed
    lp.hyps.scores.add_(torch.where(lp.win < (n_blank + lp.found).unsqueeze(1), logp, 0).sum(dim=1))
    torch.gather(label, 1, first.clamp(max=w - 1).unsqueeze(1), out=lp.pending_label.unsqueeze(1))


def _emit_step(lp: _Loop) -> None:
    """Every row that found its label in the round's single-frame find steps emits it (one
    prediction-network step for the batch): the rows within their length not searching any more."""
    _emit(lp, (lp.t < lp.lengths) > lp.active, lp.pending_label, lp.pending_dur if lp.tdt else None)


def _label_round(lp: _Loop) -> None:
    """A label-looping round (see :func:`_round_shape`): find steps, then the emit step of the rows that
    found their label; a finished loop is unchanged."""
    if lp.find_frames > 1:
        _find_label_window_step(lp)
        _emit(lp, lp.found, lp.pending_label, None)
    elif lp.find_steps == 1:
        _decide_and_emit(lp, lp.active)
    else:
        for _ in range(lp.find_steps):
            _find_label_step(lp)
        _emit_step(lp)
    _finish_round(lp)


# -- frame-looping: a round is one decision on the current frame and its emit step ---------------------


def _frame_round(lp: _Loop) -> None:
    """Rows on frame ``lp.frame`` decide together (Algorithm 2): blanks advance, labels are emitted with
    one prediction-network step for the batch (kept where emitted); then the frame moves on as a tensor
    (the earliest frame of an active row)."""
    _decide_and_emit(lp, lp.active & (lp.t == lp.frame))
    torch.amin(torch.where(lp.active, lp.t, lp.t_end), 0, out=lp.frame)
    _finish_round(lp)


# -- the driver: rounds on the device, the flag read at check points ----------------------------------


def _round_limit(lp: _Loop) -> int:
    """Rounds no call can exceed: each round every active row decides once at least (label-looping) or
    the earliest frame's rows do (frame-looping), and a frame holds at most ``max_symbols`` labels (the
    runaway guard's without a cap)."""
    cap = lp.max_symbols if lp.max_symbols is not None else _checks.MAX_SYMBOLS_GUARD + 1
    return lp.T * (cap + 1) + 2


def _run_loop(lp: _Loop, run: StepRunner, loop: str, stats: LoopStats, frames: int, rows: int) -> int:
    """Run the loop's rounds until no row is active; returns the rounds that found work. Hypothesis storage
    grows on the host before each batch of rounds (a round appends at most one label per row), bounded by
    the labels ``frames`` frames can hold. One host read after the loop: the rounds needed (the next call's
    first check), a runaway (``max_symbols=None``: raises as the reference does) and non-finite scores of
    the first ``rows`` rows (a NaN / +inf joint: the named error)."""
    # (+1: a column past the last label, where the masked writes of rows that emit nothing land)
    budget = frames * lp.max_symbols + 1 if lp.max_symbols is not None else None
    start = lp.hyps.reserved

    def grow(n: int) -> None:
        if budget is not None:
            n = min(n, start + budget - lp.hyps.reserved)
        if lp.hyps.reserve(n) and compiles(run.mode):
            _lengths_dynamic(lp)

    body = _label_round if loop == "labels" else _frame_round
    run_until_done(run, body, lp, _done, first_check=stats.estimate(frames), limit=_round_limit(lp), on_check=grow)
    _stamp_offsets(lp)
    scores = lp.hyps.scores[:rows]
    live, runaway, finite = torch.stack([lp.live, lp.runaway.long(), torch.isfinite(scores).all().long()]).tolist()
    stats.update(live, frames)
    if runaway:
        raise _checks.runaway_error()
    if not finite:
        _checks.check_greedy_scores(scores)  # raises the named error
    return live


_STATS: "weakref.WeakKeyDictionary[Any, dict[str, LoopStats]]" = weakref.WeakKeyDictionary()


def _loop_stats(model: TransducerModel, kind: str) -> LoopStats:
    """Rounds per frame that earlier calls on ``model`` needed with loop ``kind`` (shared by its decoders,
    and the one-shot :func:`greedy`'s); a fresh :class:`LoopStats` when the model takes no weak reference."""
    try:
        per_model = _STATS.setdefault(model, {})
    except TypeError:
        return LoopStats(_FIRST_ROUNDS_PER_FRAME[kind])
    if kind not in per_model:
        per_model[kind] = LoopStats(_FIRST_ROUNDS_PER_FRAME[kind])
    return per_model[kind]


def _lengths_dynamic(lp: _Loop) -> None:
    """The lengths of a static loop's tensors (the encoder output's frames, the hypotheses' columns, which
    grow) symbolic for torch.compile: one compiled step for every length bucket and storage size."""
    mark_lengths_dynamic((lp.enc, 1), (lp.enc_windows, 1), (lp.hyps.tokens, 1), (lp.hyps.timestamps, 1),
                         (lp.hyps.durations, 1))


def _done(lp: _Loop) -> torch.Tensor:
    return ~lp.busy


# -- the decoder object and the one-shot function ------------------------------------------------


def _initial_state(model: TransducerModel, batch: int, capacity: int, enc: torch.Tensor) -> GreedyState:
    dev = enc.device
    pred_state = model.initial_state(batch, device=dev, dtype=enc.dtype)
    dec_out, pred_state = model.predict(torch.full((batch,), model.blank_id, dtype=torch.long, device=dev), pred_state)
    zeros = torch.zeros(batch, dtype=torch.long, device=dev)
    hyps = BatchedHyps(batch, capacity, dev, score_dtype=enc.dtype, with_durations=model.durations is not None)
    return GreedyState(pred_state=pred_state, dec_out=dec_out, skip=zeros, offset=zeros.clone(), hyps=hyps)


def _check_settings(model: TransducerModel, loop: str, window: int, tokenizer: object) -> None:
    """What the config cannot check alone: the model, the tokenizer's size, WIND's loop and model type."""
    check_model(model)
    check_tokenizer(tokenizer, model)
    if window > 1 and (loop != "labels" or model.durations is not None):
        raise DecodingInputError("window > 1 (WIND) is supported for RNN-T label-looping (loop='labels')")


@takes_config(TransducerGreedyConfig)
class GreedyDecoder:
    """Batched greedy decoding of RNN-T / TDT encoder output, exact w.r.t. :func:`reference_greedy`:
    settings checked once, whole utterances (:meth:`decode`) or streams (:meth:`init_state`,
    :meth:`advance` per chunk, :meth:`finalize`; chunked output equals whole-utterance output).

    Args:
        model: a :class:`TransducerModel` (TDT when ``model.durations`` is set).
        config: the search's settings (:class:`~asrdecode.configs.TransducerGreedyConfig`: ``window`` (WIND,
            RNN-T label-looping; 1: off), ``max_symbols`` (None: no cap; a model that never emits blank then
            fails after ``MAX_SYMBOLS_GUARD`` labels on one frame), ``loop``, ``precompute_projections``,
            ``acceleration``, ``engine``; their help and defaults are written there); any of them may be
            given as a keyword instead or on top.
        tokenizer: fills ``Hypothesis.text`` when given.

    Compile and graph modes keep their static loops (buffers, graphs) on this object per (B, T) bucket:
    reuse one decoder across calls for warm graphs (:attr:`captures` counts the captures). The native
    engine runs :meth:`decode` in C++ (CPU float32 encoder output, eager, ``max_symbols`` set, a model whose
    weights the C++ greedy reads -- an :class:`LSTMTransducer` or a sherpa-onnx ONNX transducer of either
    layout; otherwise ``engine="native"`` is a named error, as is :meth:`advance`); ``"auto"`` takes it where
    it applies and is built. Both engines return the same tokens, frames and durations; scores agree to
    float32 rounding.

    Results: one :class:`Hypothesis` per utterance (tokens, timestamps in global frames, TDT durations,
    score). Threads: the decoder holds only its settings; each stream's state lives in its
    :class:`GreedyState`, so one decoder may serve several threads (one state per thread).
    """

    def __init__(self, model: TransducerModel, *, config: TransducerGreedyConfig | None = None,
                 tokenizer: Tokenizer | None = None, **settings: Any) -> None:
        cfg = TransducerGreedyConfig.build(config, settings, caller="GreedyDecoder")
        _check_settings(model, cfg.loop, cfg.window, tokenizer)
        self.config = cfg
        self.model = model
        self.tokenizer = tokenizer
        #: compile / CUDA-graph loops (static buffers and captured graphs) kept between calls, per bucket
        self._cache = LoopCache(8)
        self._runners: "weakref.WeakSet[StepRunner]" = weakref.WeakSet()
        self._lock = threading.Lock()
        #: rounds per frame of earlier calls: where the next call first reads the loop's flag
        self._stats = _loop_stats(model, "wind" if cfg.window > 1 else cfg.loop)

    @property
    def captures(self) -> int:
        """CUDA graphs captured by this decoder's cached loops (``acceleration="cuda_graphs"``): a warm call
        whose batch and length fall in an earlier call's bucket captures none."""
        return sum(run.captures for run in self._runners)

    def init_state(self, batch: int, *, device: torch.device | str = "cpu",
                   dtype: torch.dtype | None = None) -> GreedyState:
        """The state of ``batch`` fresh streams (start of sequence); ``dtype``: the encoder output's
        (default: the model's parameters', else float32)."""
        check_int("batch", batch, low=0)
        if dtype is None:
            param = next(iter(self.model.parameters()), None) if hasattr(self.model, "parameters") else None
            dtype = param.dtype if param is not None else torch.float32
        with torch.inference_mode():
            return _initial_state(self.model, batch, 8, torch.empty(0, device=device, dtype=dtype))

    @torch.inference_mode()
    def advance(self, state: GreedyState, encoder_output: torch.Tensor,
                lengths: torch.Tensor | Sequence[int] | None = None) -> GreedyState:
        """Decode one chunk ``encoder_output [B, T, D]`` (``lengths [B]`` valid frames, default all) after
        ``state``; returns the new state (the hypotheses object is shared and extended in place)."""
        if not isinstance(state, GreedyState):
            raise DecodingInputError(f"state must be a GreedyState from init_state / advance, got {type(state).__name__}")
        return self._advance(state, encoder_output, lengths)

    def partial(self, state: GreedyState) -> list[Hypothesis]:
        """Everything decoded so far, per utterance (timestamps in global frames)."""
        return attach_text(state.hyps.to_hypotheses(), self.tokenizer)

    def finalize(self, state: GreedyState) -> list[Hypothesis]:
        """The hypotheses at the end of the streams (greedy needs no end step: the same as :meth:`partial`)."""
        return self.partial(state)

    @torch.inference_mode()
    def decode(self, encoder_output: torch.Tensor,
               lengths: torch.Tensor | Sequence[int] | None = None) -> list[Hypothesis]:
        """Whole utterances ``encoder_output [B, T, D]`` (``lengths [B]``): one hypothesis each."""
        if self.config.engine != "torch":
            enc = check_emissions("encoder_output", encoder_output, ndim=3)
            check_encoder_output(self.model, enc)
            check_finite("encoder_output", enc)
            n = check_lengths(lengths, enc.shape[0], enc.shape[1], device=enc.device)
            weights = self._native_weights(enc)
            if weights is not None:
                from ..native.transducer_greedy_lstm import native_greedy

                assert self.config.max_symbols is not None  # _native_weights: checked
                # (a joint row with NaN / +inf or no possible label: NonFiniteJointError from the engine)
                return attach_text(native_greedy(self.model, weights, enc, n, self.config.max_symbols), self.tokenizer)
        return self.partial(self._advance(None, encoder_output, lengths, whole=True))

    __call__ = decode

    def _native_weights(self, enc: torch.Tensor) -> Any:
        """The C++ greedy's weights of the model when :meth:`decode` runs on the native engine, else None
        (``engine="native"`` where it cannot: a named error saying why)."""
        from ..native.transducer_greedy_lstm import native_greedy_weights

        eager = resolve_mode(self.config.acceleration, enc.device) == "eager"

        def fit() -> tuple[Any, str]:
            if self.config.max_symbols is None:
                return None, "max_symbols=None (the tensor engine guards a frame that never ends)"
            if enc.dtype != torch.float32:
                return None, f"the encoder output is {enc.dtype}; the C++ greedy is float32"
            return native_greedy_weights(self.model)

        return native_fit(self.config.engine, enc.device, "encoder_output", fit, "decode this call", eager=eager)

    def _advance(self, state: GreedyState | None, encoder_output: object, lengths: Any,
                 whole: bool = False) -> GreedyState:
        """One chunk from ``state`` (None: fresh streams, hypotheses sized for the chunk; ``whole``: a
        :meth:`decode` call, which reaches here on the tensor engine only)."""
        if self.config.engine == "native" and not whole:
            raise DecodingInputError("engine='native' decodes whole utterances (decode); streaming (advance) runs on "
                                     "engine='torch' or 'auto'")
        model = self.model
        enc = check_emissions("encoder_output", encoder_output, ndim=3)
        check_encoder_output(model, enc)
        check_finite("encoder_output", enc)
        B, T, _ = enc.shape
        lengths = check_lengths(lengths, B, T, device=enc.device)
        if state is None:
            state = _initial_state(model, B, max(T // 2, 8), enc)
        elif state.dec_out.shape[0] != B:
            raise DecodingInputError(f"state has batch {state.dec_out.shape[0]} but encoder_output has {B}")
        if B and T:
            check_joint_width(model, model.project_encoder(enc[:1, 0]), model.project_decoder(state.dec_out[:1]))
        if not (B and T):  # nothing to decode: the streams are where they were
            return GreedyState(pred_state=state.pred_state, dec_out=state.dec_out, skip=state.skip,
                               offset=state.offset + lengths, hyps=state.hyps)
        mode = resolve_mode(self.config.acceleration, enc.device)
        if mode == "eager":  # the loop's tensors are this call's (no padding); it writes the state's hypotheses
            lp = _Loop(model, enc, lengths, state, self.config.window, self.config.max_symbols, self.config.precompute_projections)
            _run_loop(lp, StepRunner("eager", _Loop.STATE), self.config.loop, self._stats, T, B)
            return GreedyState(pred_state=lp.pred_state, dec_out=lp.dec_out, skip=(lp.t - lengths).clamp(min=0),
                               offset=lp.offset + lengths, hyps=lp.hyps)
        with self._lock:  # the cached loop's buffers serve one call at a time
            lp, run = self._static_loop(mode, enc, state)
            lp.load(enc, lengths, state)
            _run_loop(lp, run, self.config.loop, self._stats, T, B)
            rows = lp.b_idx[:B]
            state.hyps.extend(lp.hyps)
            return GreedyState(pred_state=model.select_state(lp.pred_state, rows), dec_out=lp.dec_out[:B].clone(),
                               skip=(lp.t[:B] - lengths).clamp(min=0), offset=state.offset + lengths, hyps=state.hyps)

    def _static_loop(self, mode: str, enc: torch.Tensor, state: GreedyState) -> tuple[_Loop, StepRunner]:
        """The cached loop (static buffers) and its runner (captured graphs) for ``enc [B, T, D]``'s
        bucket: ``B`` and ``T`` padded (:func:`~asrdecode.accel.bucket`), keyed by the model's parameters,
        the settings, dtype and device; made at the bucket's first call."""
        B, T, D = enc.shape
        Bb, Tb = bucket(B), bucket(T)
        key = (parameters_key(self.model), mode, self.config.loop, self.config.window, self.config.max_symbols, self.config.precompute_projections,
               _checks.MAX_SYMBOLS_GUARD, Bb, Tb, D, enc.dtype, enc.device)

        def make() -> tuple[_Loop, StepRunner]:
            model = self.model
            padded = enc.new_zeros(Bb, Tb, D)
            rows = torch.arange(Bb, device=enc.device).clamp(max=B - 1)
            capacity = Tb * min(self.config.max_symbols or 2, 2) + 8
            hyps = BatchedHyps(Bb, capacity, enc.device, score_dtype=state.hyps.scores.dtype,
                               with_durations=model.durations is not None)
            zeros = torch.zeros(Bb, dtype=torch.long, device=enc.device)
            start = GreedyState(pred_state=model.select_state(state.pred_state, rows), dec_out=state.dec_out[rows],
                                skip=zeros, offset=zeros.clone(), hyps=hyps)
            lp = _Loop(model, padded, zeros.clone(), start, self.config.window, self.config.max_symbols, self.config.precompute_projections,
                       static=True)
            run = StepRunner(mode, _Loop.STATE)
            if compiles(mode):
                _lengths_dynamic(lp)
            self._runners.add(run)
            return lp, run

        return self._cache.get(key, make)

@takes_config(TransducerGreedyConfig)
def greedy(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    config: TransducerGreedyConfig | None = None,
    tokenizer: Tokenizer | None = None,
    state: GreedyState | None = None,
    return_state: bool = False,
    **settings: Any,
) -> list[Hypothesis] | tuple[list[Hypothesis], GreedyState]:
    """``GreedyDecoder(model, ...).decode(encoder_output, lengths)``: one hypothesis per utterance of
    ``encoder_output [B, T, D]`` (``lengths [B]``, default all ``T``); ``config`` and / or its fields as
    keywords (:class:`~asrdecode.configs.TransducerGreedyConfig`), arguments as :class:`GreedyDecoder`.

    Deprecated streaming flags (they warn): ``state=`` (the previous chunk's state) and
    ``return_state=True``; such a call returns ``(hypotheses so far, new state)``. Use
    ``dec.init_state`` / ``dec.advance`` / ``dec.finalize`` instead.
    """
    dec = GreedyDecoder(model, config=TransducerGreedyConfig.build(config, settings, caller="greedy"),
                        tokenizer=tokenizer)
    if state is None and not return_state:
        return dec.decode(encoder_output, lengths)
    warnings.warn("transducer.greedy(state=, return_state=) is deprecated: use GreedyDecoder(model, ...) with "
                  "init_state(batch), advance(state, chunk, lengths) and finalize(state) (partial(state) so far)",
                  DeprecationWarning, stacklevel=2)
    if state is not None and not isinstance(state, GreedyState):
        raise DecodingInputError(f"state must be a GreedyState, got {type(state).__name__}")
    with torch.inference_mode():
        new_state = dec._advance(state, encoder_output, lengths)
    return dec.partial(new_state), new_state
