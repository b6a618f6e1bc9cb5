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
  utterances on that frame take decisions together; after an iteration in which some utterance
  emitted a label, the prediction network runs for the whole batch and its results are kept
  only where a label was emitted.

Every step is a sync-free function of a loop state (see :mod:`asrdecode.accel`); the driver
checks one flag between steps. Streaming: :class:`GreedyDecoder`'s ``init_state`` / ``advance`` (per
chunk) / ``finalize``; the final hypotheses equal whole-utterance decoding.

``engine="native"`` runs whole-utterance decoding in C++ (:mod:`asrdecode.native.transducer_greedy_lstm`:
LSTMTransducer and sherpa-onnx ONNX weights), with the same decisions; ``"auto"`` picks it on CPU
where it applies (streaming ``advance`` stays on the tensor engine).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..accel import StepRunner, resolve_mode
from ..errors import DecodingInputError, check_emissions, check_finite, check_int, check_lengths
from ..hyps import BatchedHyps
from ..native.choice import ENGINES, use_native
from ..results import Hypothesis, Tokenizer, attach_text
from .durations import DurationRule
from .model import TransducerModel, check_joint_width, check_model, checked_joint
from . import _checks
from ._checks import DEFAULT_MAX_SYMBOLS, check_encoder_output, check_max_symbols, check_tokenizer

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


class _Loop:
    """Loop state of one greedy call: tensors only, updated by the step functions."""

    # attributes the steps replace (for the CUDA-graph in-place wrapper)
    STATE = (
        "t", "active", "found", "symbols", "pending_label", "pending_logp", "pending_dur",
        "dec_out", "dec_proj", "pred_state", "hyps", "emit",
    )  # fmt: skip

    def __init__(
        self,
        model: TransducerModel,
        enc: torch.Tensor,
        lengths: torch.Tensor,
        state: GreedyState,
        window: int,
        max_symbols: int | None,
        precompute: bool,
        compact: bool = False,
    ) -> None:
        B, T, _ = enc.shape
        self.compact = compact
        dev = enc.device
        self.model = model
        self.V = model.vocab_size
        self.blank = model.blank_id
        self.rule = DurationRule.of(model)
        self.tdt = self.rule.tdt
        self.durations = torch.tensor(self.rule.values, device=dev) if self.tdt else None
        self.max_symbols = max_symbols
        self.precompute = precompute
        self.T = T
        self.enc = model.project_encoder(enc) if precompute else enc
        self.lengths = lengths
        self.offset = state.offset
        self.b_idx = torch.arange(B, device=dev)
        self.win = torch.arange(window, device=dev)
        self.window = window
        self.hyps = state.hyps
        self.pred_state = state.pred_state
        self.dec_out = state.dec_out
        self.dec_proj = model.project_decoder(state.dec_out) if precompute else state.dec_out
        self.t = state.skip.clone()
        self.active = self.t < lengths
        self.found = ~self.active
        self.symbols = torch.zeros(B, dtype=torch.long, device=dev)
        self.pending_label = torch.full((B,), self.blank, dtype=torch.long, device=dev)
        self.pending_logp = torch.zeros(B, dtype=state.hyps.scores.dtype, device=dev)
        self.pending_dur = torch.zeros(B, dtype=torch.long, device=dev)
        self.frame = torch.zeros((), dtype=torch.long, device=dev)  # frame-looping's current frame
        self.emit = torch.zeros(B, dtype=torch.bool, device=dev)  # frame-looping's labels to emit

    # -- the joint after projection, and one decision per row ----------------------------------

    def joint_at(self, frames: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``frames [B]`` or ``[B, w]`` (clamped to the padded length) for the current labels.

        With ``rows [n]`` only those utterances are evaluated (``frames`` then has ``n`` rows).
        """
        frames = frames.clamp(max=self.T - 1)
        b = self.b_idx if rows is None else rows
        dec = self.dec_proj if rows is None else self.dec_proj[rows]
        if frames.dim() == 1:
            enc = self.enc[b, frames]
        else:
            enc = self.enc[b.unsqueeze(1), frames]
            dec = dec.unsqueeze(1)
        if not self.precompute:
            enc = self.model.project_encoder(enc)
            dec = self.model.project_decoder(dec)
        return checked_joint(self.model, enc, dec)

    def decisions(
        self, frames: torch.Tensor, rows: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`decide` at ``frames``; with ``rows`` only for those, the others get (blank, 0, 0)."""
        if rows is None:
            return self.decide(self.joint_at(frames))
        out = self.decide(self.joint_at(frames[rows], rows))
        fills = (self.blank, 0, 0)
        return tuple(  # type: ignore[return-value]
            x.new_full(frames.shape, fill).index_copy_(0, rows, x) for x, fill in zip(out, fills)
        )

    def decide(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Greedy decision per row: (label, log-prob of the decision, duration value; 0 for RNN-T)."""
        tok = logits[..., : self.V]
        val, label = tok.max(dim=-1)
        logp = val - torch.logsumexp(tok, dim=-1)
        if not self.tdt:
            return label, logp.to(self.pending_logp.dtype), torch.zeros_like(label)
        dur_logits = logits[..., self.V :]
        dval, didx = dur_logits.max(dim=-1)
        logp = logp + dval - torch.logsumexp(dur_logits, dim=-1)
        return label, logp.to(self.pending_logp.dtype), self.durations[didx]  # type: ignore[index]  # set: TDT

    # -- steps shared by both loops --------------------------------------------------------------

    def emit_and_advance(self, emit: torch.Tensor, label: torch.Tensor, logp: torch.Tensor, dur: torch.Tensor) -> None:
        """Append ``label`` where ``emit``, advance time by the label rule, update the prediction network."""
        self.hyps.write(emit, label, self.t + self.offset, dur if self.tdt else None)
        self.hyps.scores += torch.where(emit, logp, 0)
        symbols = self.symbols + emit.long()
        advance = self.rule.label_advance(dur)
        if self.max_symbols is not None:
            forced = emit & (advance == 0) & (symbols >= self.max_symbols)
            advance = advance + forced.long()
        self.t = self.t + torch.where(emit, advance, 0)
        self.symbols = torch.where(emit & (advance > 0), 0, symbols)
        dec_out, new_state = self.model.predict(torch.where(emit, label, self.blank), self.pred_state)
        self.pred_state = self.model.replace_state(self.pred_state, new_state, emit)
        self.dec_out = torch.where(emit.unsqueeze(1), dec_out, self.dec_out)
        if self.precompute:
            self.dec_proj = torch.where(emit.unsqueeze(1), self.model.project_decoder(dec_out), self.dec_proj)
        else:
            self.dec_proj = self.dec_out
        self.active = self.t < self.lengths

    def blank_advance(self, dur: torch.Tensor) -> torch.Tensor:
        """Frames a blank decision advances: 1 for RNN-T, the duration (at least 1) for TDT."""
        return self.rule.blank_advance(dur)


# -- label-looping steps ---------------------------------------------------------------------------


def _find_label_step(lp: _Loop, rows: torch.Tensor | None = None) -> None:
    """Inner loop body, one frame: consume a blank or record the pending label (RNN-T and TDT).

    ``rows`` (CPU only): the utterances still searching, so the joint runs for those alone.
    """
    need = lp.active & ~lp.found
    label, logp, dur = lp.decisions(lp.t, rows)
    is_blank = label == lp.blank
    consume = need & is_blank
    has = need & ~is_blank
    lp.hyps.scores += torch.where(consume, logp, 0)
    lp.t = lp.t + torch.where(consume, lp.blank_advance(dur), 0)
    lp.symbols = torch.where(consume, 0, lp.symbols)
    lp.pending_label = torch.where(has, label, lp.pending_label)
    lp.pending_logp = torch.where(has, logp, lp.pending_logp)
    lp.pending_dur = torch.where(has, dur, lp.pending_dur)
    lp.active = lp.t < lp.lengths
    lp.found = lp.found | has | ~lp.active


def _find_label_window_step(lp: _Loop, rows: torch.Tensor | None = None) -> None:
    """Inner loop body with a WIND window (RNN-T): evaluate ``w`` frames, jump to the first label."""
    need = lp.active & ~lp.found
    frames = lp.t.unsqueeze(1) + lp.win  # [B, w]
    valid = (frames < lp.lengths.unsqueeze(1)) & need.unsqueeze(1)
    label, logp, _ = lp.decisions(frames, rows)  # [B, w]
    is_blank = label == lp.blank
    nonblank = valid & ~is_blank
    has = nonblank.any(dim=1)
    first = nonblank.to(torch.int8).argmax(dim=1)  # first label frame (0 when none)
    n_blank = torch.where(has, first, valid.sum(dim=1))  # blanks consumed before it
    consumed = torch.where(lp.win.unsqueeze(0) < n_blank.unsqueeze(1), logp, 0)
    lp.hyps.scores += consumed.sum(dim=1)
    lp.t = lp.t + n_blank
    lp.symbols = torch.where(n_blank > 0, 0, lp.symbols)
    at = first.unsqueeze(1)
    lp.pending_label = torch.where(has, label.gather(1, at).squeeze(1), lp.pending_label)
    lp.pending_logp = torch.where(has, logp.gather(1, at).squeeze(1), lp.pending_logp)
    lp.active = lp.t < lp.lengths
    lp.found = lp.found | has | ~lp.active


def _emit_step(lp: _Loop) -> None:
    """Outer loop body: every active utterance emits its pending label."""
    lp.emit_and_advance(lp.active, lp.pending_label, lp.pending_logp, lp.pending_dur)
    lp.found = ~lp.active


def _check_runaway(lp: _Loop, steps: int) -> None:
    """Every 1024 label steps, fail (as the reference does) if a frame holds too many labels."""
    if steps % 1024 == 0 and lp.max_symbols is None and int(lp.symbols.max()) > _checks.MAX_SYMBOLS_GUARD:
        raise _checks.runaway_error()


def _label_loop(lp: _Loop, run: StepRunner) -> None:
    find = _find_label_window_step if lp.window > 1 else _find_label_step
    steps = 0
    batch = lp.b_idx.numel()
    while bool(lp.active.any()):
        while not bool(lp.found.all()):
            rows = None
            if lp.compact:  # CPU: evaluate the joint only for the utterances still searching
                rows = (~lp.found).nonzero().squeeze(1)
                rows = None if rows.numel() == batch else rows
            run(find, lp, rows)
        if not bool(lp.active.any()):
            break
        lp.hyps.reserve_append()
        run(_emit_step, lp)
        steps += 1
        _check_runaway(lp, steps)


# -- frame-looping step ----------------------------------------------------------------------------


def _frame_decide_step(lp: _Loop) -> None:
    """One decision for every utterance on frame ``lp.frame``: blanks are consumed, labels wait in ``emit``."""
    on_frame = lp.active & (lp.t == lp.frame)
    label, logp, dur = lp.decide(lp.joint_at(lp.t))
    is_blank = label == lp.blank
    consume = on_frame & is_blank
    lp.hyps.scores += torch.where(consume, logp, 0)
    lp.t = lp.t + torch.where(consume, lp.blank_advance(dur), 0)
    lp.symbols = torch.where(consume, 0, lp.symbols)
    lp.emit = on_frame & ~is_blank
    lp.pending_label, lp.pending_logp, lp.pending_dur = label, logp, dur
    lp.active = lp.t < lp.lengths
    lp.found = ~(lp.active & (lp.t == lp.frame))


def _frame_emit_step(lp: _Loop) -> None:
    """Emit the waiting labels; the prediction network runs for the whole batch (kept where emitted)."""
    lp.emit_and_advance(lp.emit, lp.pending_label, lp.pending_logp, lp.pending_dur)
    lp.found = ~(lp.active & (lp.t == lp.frame))


def _frame_loop(lp: _Loop, run: StepRunner) -> None:
    max_len = int(lp.lengths.max()) if lp.lengths.numel() else 0
    steps = 0
    for frame in range(max_len):
        lp.frame.fill_(frame)
        lp.found = ~(lp.active & (lp.t == frame))
        while not bool(lp.found.all()):
            run(_frame_decide_step, lp)
            if bool(lp.emit.any()):  # as Algorithm 2: the decoder runs only after a label
                lp.hyps.reserve_append()
                run(_frame_emit_step, lp)
                steps += 1
                _check_runaway(lp, steps)


# -- the decoder object and the one-shot function ------------------------------------------------


def _initial_state(model: TransducerModel, batch: int, capacity: int, enc: torch.Tensor) -> GreedyState:
    dev = enc.device
    pred_state = model.initial_state(batch, device=dev, dtype=enc.dtype)
    dec_out, pred_state = model.predict(torch.full((batch,), model.blank_id, dtype=torch.long, device=dev), pred_state)
    zeros = torch.zeros(batch, dtype=torch.long, device=dev)
    hyps = BatchedHyps(batch, capacity, dev, score_dtype=enc.dtype, with_durations=model.durations is not None)
    return GreedyState(pred_state=pred_state, dec_out=dec_out, skip=zeros, offset=zeros.clone(), hyps=hyps)


def _check_settings(model: TransducerModel, loop: str, window: int, max_symbols: int | None, tokenizer: object) -> None:
    check_model(model)
    check_tokenizer(tokenizer, model)
    if loop not in _LOOPS:
        raise DecodingInputError(f"loop must be one of {_LOOPS}, got {loop!r}")
    _checks.check_window_size(window)
    if window > 1 and (loop != "labels" or model.durations is not None):
        raise DecodingInputError("window > 1 (WIND) is supported for RNN-T label-looping (loop='labels')")
    check_max_symbols(max_symbols)


class GreedyDecoder:
    """Batched greedy decoding of RNN-T / TDT encoder output, exact w.r.t. :func:`reference_greedy`:
    settings checked once, whole utterances (:meth:`decode`) or streams (:meth:`init_state`,
    :meth:`advance` per chunk, :meth:`finalize`; chunked output equals whole-utterance output).

    Args:
        model: a :class:`TransducerModel` (TDT when ``model.durations`` is set).
        loop: "labels" (label-looping) or "frames" (frame-looping baseline).
        window: WIND window size (RNN-T label-looping); 1 disables WIND.
        max_symbols: at most this many labels per frame (then time advances; default 10, as
            NeMo); None = no limit (a model that never emits blank then fails after
            ``MAX_SYMBOLS_GUARD`` labels on one frame).
        precompute_projections: project encoder output once and each label once (paper 3.4);
            False projects inside every joint call (the baseline of the paper's Table 4).
        tokenizer: fills ``Hypothesis.text`` when given.
        acceleration: "eager", "compile", "cuda_graphs", or None/"auto" (CUDA graphs on GPU).
        engine: "torch" (these tensor loops), "native" (:meth:`decode` in C++: CPU float32 encoder output,
            eager, ``max_symbols`` set, a model whose weights the C++ greedy reads -- an
            :class:`LSTMTransducer` or a sherpa-onnx ONNX transducer of either layout; otherwise a named
            error, as is :meth:`advance`), or "auto" (native where it applies and is built, else torch).
            Both engines return the same tokens, frames and durations; scores agree to float32 rounding.

    Results: one :class:`Hypothesis` per utterance (tokens, timestamps in global frames, TDT durations,
    score). Threads: the decoder holds only its settings; each stream's state lives in its
    :class:`GreedyState`, so one decoder may serve several threads (one state per thread).
    """

    def __init__(self, model: TransducerModel, *, loop: str = "labels", window: int = 1,
                 max_symbols: int | None = DEFAULT_MAX_SYMBOLS, precompute_projections: bool = True,
                 tokenizer: Tokenizer | None = None, acceleration: str | None = None, engine: str = "auto") -> None:
        _check_settings(model, loop, window, max_symbols, tokenizer)
        if not isinstance(engine, str) or engine not in ENGINES:
            raise DecodingInputError(f"engine must be one of {', '.join(repr(e) for e in ENGINES)}, got {engine!r}")
        self.engine = engine
        self.model = model
        self.loop = loop
        self.window = window
        self.max_symbols = max_symbols
        self.precompute = precompute_projections
        self.tokenizer = tokenizer
        self.acceleration = acceleration

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
        if self.engine != "torch":
            enc = check_emissions("encoder_output", encoder_output, ndim=3)
            check_encoder_output(self.model, enc)
            check_finite("encoder_output", enc)
            n = check_lengths(lengths, enc.shape[0], enc.shape[1], device=enc.device)
            weights = self._native_weights(enc)
            if weights is not None:
                from ..native.transducer_greedy_lstm import native_greedy

                assert self.max_symbols is not None  # _native_weights: checked
                return attach_text(native_greedy(self.model, weights, enc, n, self.max_symbols), self.tokenizer)
        return self.partial(self._advance(None, encoder_output, lengths, whole=True))

    __call__ = decode

    def _native_weights(self, enc: torch.Tensor) -> Any:
        """The C++ greedy's weights of the model when :meth:`decode` runs on the native engine, else None
        (``engine="native"`` where it cannot: a named error saying why)."""
        from ..native.transducer_greedy_lstm import native_greedy_weights

        eager = resolve_mode(self.acceleration, enc.device) == "eager"
        if not use_native(self.engine, enc.device, "encoder_output", eager=eager):  # device, mode, build first
            return None
        why = None
        if self.max_symbols is None:
            why = "max_symbols=None (the tensor engine guards a frame that never ends)"
        elif enc.dtype != torch.float32:
            why = f"the encoder output is {enc.dtype}; the C++ greedy is float32"
        weights = None
        if why is None:
            weights, why = native_greedy_weights(self.model)
        if weights is None:
            if self.engine == "native":
                raise DecodingInputError(f"engine='native' cannot decode this call: {why}; use engine='torch' or 'auto'")
            return None
        return weights

    def _advance(self, state: GreedyState | None, encoder_output: object, lengths: Any,
                 whole: bool = False) -> GreedyState:
        """One chunk from ``state`` (None: fresh streams, hypotheses sized for the chunk; ``whole``: a
        :meth:`decode` call, which reaches here on the tensor engine only)."""
        if self.engine == "native" and not whole:
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
        mode = resolve_mode(self.acceleration, enc.device)
        # Eager mode (CPU) runs the label search only on the utterances still searching; the static
        # shapes that compile and CUDA graphs need evaluate every row (the same step function).
        lp = _Loop(model, enc, lengths, state, self.window, self.max_symbols, self.precompute,
                   compact=mode == "eager")
        run = StepRunner(mode, _Loop.STATE)
        (_label_loop if self.loop == "labels" else _frame_loop)(lp, run)
        _checks.check_greedy_scores(lp.hyps.scores)
        return GreedyState(pred_state=lp.pred_state, dec_out=lp.dec_out, skip=(lp.t - lengths).clamp(min=0),
                           offset=lp.offset + lengths, hyps=lp.hyps)


def greedy(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    loop: str = "labels",
    window: int = 1,
    max_symbols: int | None = DEFAULT_MAX_SYMBOLS,
    precompute_projections: bool = True,
    tokenizer: Tokenizer | None = None,
    state: GreedyState | None = None,
    return_state: bool = False,
    acceleration: str | None = None,
    engine: str = "auto",
) -> list[Hypothesis] | tuple[list[Hypothesis], GreedyState]:
    """``GreedyDecoder(model, ...).decode(encoder_output, lengths)``: one hypothesis per utterance of
    ``encoder_output [B, T, D]`` (``lengths [B]``, default all ``T``); arguments as :class:`GreedyDecoder`.

    Deprecated streaming flags (they warn): ``state=`` (the previous chunk's state) and
    ``return_state=True``; such a call returns ``(hypotheses so far, new state)``. Use
    ``dec.init_state`` / ``dec.advance`` / ``dec.finalize`` instead.
    """
    dec = GreedyDecoder(model, loop=loop, window=window, max_symbols=max_symbols,
                        precompute_projections=precompute_projections, tokenizer=tokenizer, acceleration=acceleration,
                        engine=engine)
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
