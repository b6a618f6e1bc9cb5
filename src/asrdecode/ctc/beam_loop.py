"""The CTC prefix beam search's frame loop as a device loop (DESIGN rule 3): CUDA graphs on a GPU.

The tensor engine's frame step (:class:`~asrdecode.ctc.beam_step._Stepper`) is sync-free and
static-shape; here it runs over a :class:`FrameLoop`: static buffers padded to :func:`bucket`
sizes (emissions time-major ``[Tb, Bb, V]``, lengths ``[Bb]``, original frame indices ``[Tb, Bb]``,
the ``[Bb, K]`` search state, the backpointer tree's steps ``[Tb, Bb, K]`` and the frame counter
``t [1]`` on the device). A round is :data:`UNROLL` frames: read frame ``t``, step every utterance
with ``t < lens`` (the others keep their state), write the tree step at ``t``, ``t += 1``. The
rounds are replayed by :func:`~asrdecode.accel.run_until_done` (in ``"cuda_graphs"`` mode one graph
replay per round, captured once) and the flag is read once, after the last round. Loops live in a
:class:`~asrdecode.accel.LoopCache` keyed by the settings, the fusion models (their identity and
tensor addresses) and the bucketed sizes, so a warm call captures nothing. Padded rows have length 0.

:func:`loop_mode` picks the loop: ``"eager"`` (CPU: the plain Python frame loop of
:mod:`asrdecode.ctc.beam` is kept, it has no padding) or ``"cuda_graphs"`` (CUDA).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..accel import LoopCache, StepRunner, bucket, resolve_mode, run_until_done
from ..fusion import FusionScorer
from .beam_step import _Stepper

__all__ = ["FrameLoop", "loop_mode", "run_frames_on_device", "LOOPS", "UNROLL"]

#: frames per captured round (one graph replay)
UNROLL = 2
#: the loops kept between calls (static buffers and captured graphs)
LOOPS = LoopCache(8)

#: the search state's fields, in the order :meth:`_Stepper.core` takes and returns them
FIELDS = ("p_b", "p_nb", "fscore", "length", "last", "hash", "parent_hash", "peak", "fstates")
STATE_NAMES = FIELDS + ("t", "x", "lens", "times", "tree_tok", "tree_par", "tree_dat")


def loop_mode(device: torch.device) -> str:
    """``"cuda_graphs"`` on a CUDA device, else ``"eager"`` (the Python frame loop)."""
    return resolve_mode(None, device)


class FrameLoop:
    """Static buffers of the device frame loop for ``batch`` (bucketed) utterances of at most ``frames``
    (bucketed, a multiple of :data:`UNROLL`) frames, with the step and its runner (captured graphs)."""

    def __init__(self, stepper: _Stepper, scorer: FusionScorer, batch: int, frames: int, vocab: int, beam: int,
                 dtype: torch.dtype, device: torch.device, mode: str) -> None:
        self.stepper, self.batch, self.frames = stepper, batch, frames
        self.x = torch.zeros((frames, batch, vocab), dtype=dtype, device=device)
        self.lens = torch.zeros(batch, dtype=torch.long, device=device)
        self.times = torch.zeros((frames, batch), dtype=torch.long, device=device)
        self.tree_tok, self.tree_par, self.tree_dat = torch.zeros((3, frames, batch, beam), dtype=torch.long,
                                                                  device=device).unbind(0)
        self.t = torch.zeros(1, dtype=torch.long, device=device)
        self.p_b, self.p_nb, self.peak = torch.full((3, batch, beam), -math.inf, dtype=dtype, device=device).unbind(0)
        self.fscore, self.length = torch.zeros((2, batch, beam), dtype=dtype, device=device).unbind(0)
        self.last, self.hash, self.parent_hash = torch.full((3, batch, beam), -1, dtype=torch.long,
                                                            device=device).unbind(0)
        self.parent_hash.fill_(-2)
        self.fstates = torch.zeros((batch, beam, scorer.num_models), dtype=torch.long, device=device)
        self.runner = StepRunner(mode, STATE_NAMES)

    def load(self, st: Any, x: torch.Tensor, lens: torch.Tensor, frame_index: torch.Tensor) -> None:
        """Copy a call's state ``st`` (rows ``:B``), emissions ``x [B, T, V]``, lengths and original frames
        into the buffers; the padded rows get length 0 (they keep whatever state they hold)."""
        B, T = x.shape[:2]
        for name in FIELDS:
            getattr(self, name)[:B].copy_(getattr(st, name))
        self.x[:T, :B].copy_(x.transpose(0, 1))
        self.times[:T, :B].copy_(frame_index.transpose(0, 1))
        self.lens.zero_()
        self.lens[:B].copy_(lens)
        self.t.zero_()

    def unload(self, st: Any, batch: int, frames: int) -> None:
        """The state rows ``:batch`` back into ``st`` (copies: the buffers serve the next call) and the
        ``frames`` tree steps appended to its tree."""
        for name in FIELDS:
            setattr(st, name, getattr(self, name)[:batch].clone())
        st.tree.record_steps(self.tree_tok[:frames, :batch], self.tree_par[:frames, :batch],
                             self.tree_dat[:frames, :batch])


def _frame(loop: FrameLoop) -> None:
    """One frame at the device counter ``t``: every utterance with ``t < lens`` steps (sync-free)."""
    e = loop.x.index_select(0, loop.t)[0]  # [Bb, V]
    times = loop.times.index_select(0, loop.t)[0]  # [Bb]
    active = loop.lens > loop.t
    out = loop.stepper.core(loop.p_b, loop.p_nb, loop.fscore, loop.length, loop.last, loop.hash, loop.parent_hash,
                            loop.peak, loop.fstates, e, active)
    for name, value in zip(FIELDS, out):
        setattr(loop, name, value)
    tok, par = out[-2], out[-1]
    loop.tree_tok.index_copy_(0, loop.t, tok[None])
    loop.tree_par.index_copy_(0, loop.t, par[None])
    loop.tree_dat.index_copy_(0, loop.t, times[None, :, None].expand(1, *tok.shape))
    loop.t.add_(1)


def _round(loop: FrameLoop) -> None:
    """:data:`UNROLL` frames (one captured graph)."""
    for _ in range(UNROLL):
        _frame(loop)


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
        stepper = _Stepper(Bb, beam, V, blank, scorer, beta, beam_threshold, token_beam, x.dtype, x.device)
        return FrameLoop(stepper, scorer, Bb, Tb, V, beam, x.dtype, x.device, mode)

    loop: FrameLoop = LOOPS.get(key, make)
    loop.load(st, x, lens, frame_index)
    rounds = -(-T // UNROLL)
    end = torch.full((1,), rounds * UNROLL, dtype=torch.long, device=x.device)
    run_until_done(loop.runner, _round, loop, lambda lp: (lp.t >= end)[0], first_check=rounds, limit=rounds)
    loop.unload(st, B, T)
