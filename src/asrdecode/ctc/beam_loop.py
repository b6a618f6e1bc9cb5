"""The CTC prefix beam search's frame loop as a device loop (DESIGN rule 3): CUDA graphs on a GPU.

The tensor engine's frame step (:class:`~asrdecode.ctc.beam_step.Stepper`) is sync-free and
static-shape; here it runs over a :class:`FrameLoop`: static buffers padded to :func:`bucket`
sizes (emissions time-major ``[Tb, Bb, V]``, lengths ``[Bb, 1]``, original frame indices ``[Tb, Bb]``,
the search state packed in the step's :class:`~asrdecode.ctc.beam_step.FrameBuffers`, the backpointer
tree's tokens and parents ``[Tb, 2, Bb, K]`` (their times: the frame indices, at the end) and the frame
counter ``t [1]`` on the device). A round is :data:`UNROLL` frames: read frame ``t``, step every
utterance with ``t < lens`` (the others keep their state), write the tree step at ``t``, ``t += 1``. The
rounds are replayed by :func:`~asrdecode.accel.run_until_done` (in ``"cuda_graphs"`` mode one graph
replay per round, captured once) and the flag is read once, after the last round. Loops live in a
:class:`~asrdecode.accel.LoopCache` keyed by the settings, the fusion models (their identity and
tensor addresses) and the bucketed sizes, so a warm call captures nothing. Padded rows have length 0.

:func:`loop_mode` picks the loop from the search's ``acceleration`` setting: ``"eager"`` (the CPU's default:
the plain Python frame loop of :mod:`asrdecode.ctc.beam` is kept, it has no padding), ``"cuda_graphs"``
(CUDA's default) or ``"compile"`` (the round under torch.compile, as its pure twin).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..accel import LoopCache, PureStep, StepRunner, bucket, copy_all, resolve_mode, run_until_done
from ..fusion import FusionScorer
from .beam_step import Stepper

__all__ = ["FrameLoop", "loop_mode", "run_frames_on_device", "LOOPS", "UNROLL"]

#: frames per captured round (one graph replay)
UNROLL = 2
#: the loops kept between calls (static buffers and captured graphs)
LOOPS = LoopCache(8)

#: the loop's tensors: the packed search state (with its scratch rows) and the static buffers
STATE_NAMES = ("floats", "ints", "t", "x", "lens", "times", "tree")


def loop_mode(device: torch.device, acceleration: Optional[str] = None) -> str:
    """The search's ``acceleration`` setting resolved on ``device``: ``None`` / "auto": ``"cuda_graphs"`` on a
    CUDA device, else ``"eager"`` (the Python frame loop); "compile": the device loop under torch.compile.
    An unknown mode, or CUDA graphs off CUDA, is a :class:`~asrdecode.errors.DecodingInputError`."""
    return resolve_mode(acceleration, device)


class FrameLoop:
    """Static buffers of the device frame loop for ``batch`` (bucketed) utterances of at most ``frames``
    (bucketed, a multiple of :data:`UNROLL`) frames, with the step and its runner (captured graphs).

    ``tree [Tb, 2, Bb, K]``: each frame's tree tokens and parents (the times come from ``times`` at
    the end); the search state is the step's :class:`~asrdecode.ctc.beam_step.FrameBuffers`."""

    def __init__(self, stepper: Stepper, batch: int, frames: int, vocab: int, beam: int,
                 dtype: torch.dtype, device: torch.device, mode: str) -> None:
        self.stepper, self.batch, self.frames = stepper, batch, frames
        self.x = torch.zeros((frames, batch, vocab), dtype=dtype, device=device)
        self.lens = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.times = torch.zeros((frames, batch), dtype=torch.long, device=device)
        self.tree = torch.zeros((frames, 2, batch, beam), dtype=torch.long, device=device)
        self.t = torch.zeros(1, dtype=torch.long, device=device)
        self.fb = stepper.buffers(device)
        self.floats, self.ints = self.fb.floats, self.fb.ints
        self.rec1 = self.fb.rec[None]
        self.round_frames = torch.arange(UNROLL, device=device)  # the tree steps a round writes, from t
        self.runner = StepRunner(mode, STATE_NAMES)

    def twin(self) -> "FrameLoop":
        """An independent copy of the loop's state (its own buffers and views, the same step), in eager
        mode: for lockstep tests that run a round both ways from the same state (tests/lockstep.py)."""
        T, B, V = self.x.shape
        other = FrameLoop(self.stepper, B, T, V, self.stepper.K, self.x.dtype, self.x.device, "eager")
        for name in STATE_NAMES:
            getattr(other, name).copy_(getattr(self, name))
        return other

    def load(self, st: Any, x: torch.Tensor, lens: torch.Tensor, frame_index: torch.Tensor) -> None:
        """Copy a call's state ``st`` (rows ``:B``), emissions ``x [B, T, V]``, lengths and original frames
        into the buffers; the padded rows get length 0 (they keep whatever state they hold)."""
        B, T = x.shape[:2]
        self.fb.load(st, B)
        self.x[:T, :B].copy_(x.transpose(0, 1))
        self.times[:T, :B].copy_(frame_index.transpose(0, 1))
        self.lens.zero_()
        self.lens[:B, 0].copy_(lens)
        self.t.zero_()

    def unload(self, st: Any, batch: int, frames: int) -> None:
        """The state rows ``:batch`` back into ``st`` (copies: the buffers serve the next call) and the
        ``frames`` tree steps appended to its tree."""
        self.fb.store(st, batch)
        st.tree.record_steps(self.tree[:frames, 0, :batch], self.tree[:frames, 1, :batch],
                             self.times[:frames, :batch])


def _frame(loop: FrameLoop) -> None:
    """One frame at the device counter ``t``: every utterance with ``t < lens`` steps (sync-free)."""
    torch.index_select(loop.x, 0, loop.t, out=loop.fb.e3)
    loop.stepper.frame(loop.fb, loop.lens > loop.t)
    loop.tree.index_copy_(0, loop.t, loop.rec1)
    loop.t.add_(1)


def _round(loop: FrameLoop) -> None:
    """:data:`UNROLL` frames (one captured graph)."""
    for _ in range(UNROLL):
        _frame(loop)


def _pure_round(stepper: Stepper, xs: torch.Tensor, lens: torch.Tensor, floats: torch.Tensor, ints: torch.Tensor,
                t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_round` as a pure function (what ``torch.compile`` traces, :class:`~asrdecode.accel.PureStep`):
    the round's frames ``xs [UNROLL, Bb, V]`` (frames ``t [1]`` on) on the state ``floats`` / ``ints`` (read,
    not written); returns the new state, ``t + UNROLL`` and the round's tree steps ``[UNROLL, 2, Bb, K]``.
    Nothing in it depends on the loop's length: one compiled graph serves every length bucket."""
    fb = stepper.buffers(xs.device, floats.clone(), ints.clone())
    steps = []
    for i in range(UNROLL):
        fb.e.copy_(xs[i])
        stepper.frame(fb, lens > t)
        steps.append(fb.rec.clone())
        t = t + 1
    return fb.floats, fb.ints, t, torch.stack(steps)


def _pure_inputs(loop: FrameLoop) -> tuple:
    """The pure round's inputs, its frames read here (eagerly, in the captured graph)."""
    xs = loop.x.index_select(0, loop.t + loop.round_frames)
    return loop.stepper, xs, loop.lens, loop.floats, loop.ints, loop.t


def _write_round(loop: FrameLoop, out: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    floats, ints, t, steps = out
    loop.tree.index_copy_(0, loop.t + loop.round_frames, steps)
    copy_all([loop.floats, loop.ints, loop.t], [floats, ints, t])


_round.pure = PureStep(_pure_inputs, _pure_round, _write_round)  # type: ignore[attr-defined]


def run_frames_on_device(st: Any, x: torch.Tensor, lens: torch.Tensor, frame_index: torch.Tensor,
                         scorer: FusionScorer, *, beam: int, blank: int, beta: float, beam_threshold: float,
                         token_beam: Optional[int], mode: str) -> None:
    """The frames of ``x [B, T, V]`` (``lens [B]`` valid, ``frame_index [B, T]`` original frames) into the
    search state ``st`` (updated in place) by a cached device loop; one host read (the end flag)."""
    B, T, V = x.shape
    if T == 0:
        return
    Bb = bucket(B, 8)
    Tb = -(-bucket(T, 16) // UNROLL) * UNROLL
    key = (mode, Bb, Tb, V, beam, blank, beta, beam_threshold, token_beam, x.dtype, x.device,
           scorer.graph_key())

    def make() -> FrameLoop:
        scorer.watch_on(x.device)  # (a user fusion model's flag, made before any capture)
        stepper = Stepper(Bb, beam, V, blank, scorer, beta, beam_threshold, token_beam, x.dtype, x.device)
        return FrameLoop(stepper, Bb, Tb, V, beam, x.dtype, x.device, mode)

    loop: FrameLoop = LOOPS.get(key, make)
    loop.load(st, x, lens, frame_index)
    rounds = -(-T // UNROLL)
    end = torch.full((1,), rounds * UNROLL, dtype=torch.long, device=x.device)
    run_until_done(loop.runner, _round, loop, lambda lp: (lp.t >= end)[0], first_check=rounds, limit=rounds)
    loop.unload(st, B, T)
    if loop.stepper.scorer is not scorer:  # a cached loop's rounds update the scorer they were captured with
        loop.stepper.scorer.check_scores()
