"""Latency settings of streams: a latency in seconds -> the block front end's block and contexts.

A stream's **latency** is the longest algorithmic wait of an encoder frame before it is decoded:
the first frame of a block waits for the rest of the block and for the lookahead, so
``latency = (block_frames + right_context) * frame_seconds``. Compute time comes on top (the
measured delays of final words are in ``docs/serving.md``, ``benchmarks/stream_latency.py``).

Each model has a :class:`LatencyPolicy` (:func:`latency_policy`): how a latency splits into block and
lookahead (``right_fraction`` of it is lookahead, the block at most ``max_block_frames``, so that
partial results come at least as often as with the old fixed front end), how much left context a
block's window gets, and the default latency (``docs/serving.md``: for ``phone-ctc`` the smallest
measured latency whose data/real WER is within 2.0 points of whole-file decoding).

Example::

    policy = latency_policy(load_bundle("phone-ctc"))
    policy.context(1.2)        # BlockContext(block_frames=25, left_context=50, right_context=35)
    policy.info()              # the default latency and its block / left / right in seconds
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import DecodingInputError

__all__ = ["latency_in_force", "BlockContext", "LatencyPolicy", "LatencyError", "latency_policy", "check_latency", "POLICIES", "OLD_FRONT",
           "MIN_LATENCY_SECONDS", "MAX_LATENCY_SECONDS"]

#: bounds of any latency setting (seconds); a model's frame length may round a small one up to one frame
MIN_LATENCY_SECONDS = 0.02
MAX_LATENCY_SECONDS = 10.0


class LatencyError(DecodingInputError):
    """A latency setting that is not a finite number of seconds in the accepted range."""


def check_latency(name: str, value: object) -> float:
    """``value`` as a float number of seconds in [:data:`MIN_LATENCY_SECONDS`, :data:`MAX_LATENCY_SECONDS`];
    :class:`LatencyError` naming ``name`` otherwise (bools and strings are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LatencyError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or not MIN_LATENCY_SECONDS <= v <= MAX_LATENCY_SECONDS:
        raise LatencyError(f"{name} must be between {MIN_LATENCY_SECONDS:g} and {MAX_LATENCY_SECONDS:g} seconds, "
                           f"got {value!r}")
    return v


@dataclass(frozen=True)
class BlockContext:
    """The block front end's geometry in encoder frames: ``N`` (block), ``C`` (left), ``R`` (right)."""

    block_frames: int
    left_context: int
    right_context: int

    def latency_frames(self) -> int:
        """``N + R``: the longest wait of a frame, in frames."""
        return self.block_frames + self.right_context

    def seconds(self, frame_seconds: float) -> dict[str, float]:
        """``{"latency", "block", "left", "right"}`` in seconds (``frame_seconds`` per frame)."""
        f = float(frame_seconds)
        return {"latency": round(self.latency_frames() * f, 4), "block": round(self.block_frames * f, 4),
                "left": round(self.left_context * f, 4), "right": round(self.right_context * f, 4)}


@dataclass(frozen=True)
class LatencyPolicy:
    """One model's latency -> :class:`BlockContext` rule.

    Attributes:
        frame_seconds: the model's encoder frame length.
        default_latency: the latency of a stream that names none (seconds).
        right_fraction: share of the latency that is lookahead (``R = round(total * right_fraction)``).
        max_block_frames: largest block ``N`` (the rest of a long latency is lookahead), which bounds
            how long a partial result waits for new text.
        left_frames: left context ``C`` of every block.
    """

    frame_seconds: float
    default_latency: float
    right_fraction: float
    max_block_frames: int
    left_frames: int

    def context(self, latency: Optional[float] = None) -> BlockContext:
        """The block and contexts of ``latency`` seconds (``None``: :attr:`default_latency`).

        ``total = max(1, round(latency / frame_seconds))`` frames split into ``R = round(total *
        right_fraction)`` and ``N = total - R`` (at least 1, at most ``max_block_frames``; what the
        cap takes from the block goes to ``R``)."""
        lat = self.default_latency if latency is None else check_latency("latency", latency)
        total = max(1, int(round(lat / self.frame_seconds)))
        right = min(total - 1, int(round(total * self.right_fraction)))
        block = min(total - right, self.max_block_frames)
        return BlockContext(block, self.left_frames, total - block)

    def info(self, latency: Optional[float] = None) -> dict[str, Any]:
        """What :meth:`context` gives for ``latency`` as JSON-ready data: the latency asked for, and
        the block / left / right in frames and seconds (``latency`` in force = ``N + R`` frames)."""
        ctx = self.context(latency)
        asked = self.default_latency if latency is None else float(latency)
        return {"requested": asked, **ctx.seconds(self.frame_seconds), "frames": {
            "block": ctx.block_frames, "left": ctx.left_context, "right": ctx.right_context},
            "frame_seconds": self.frame_seconds}


#: the bundled models' policies (``benchmarks/stream_latency.py`` measured them; ``docs/serving.md``)
POLICIES: dict[str, LatencyPolicy] = {
    # hama's recogniser attends over its whole input: lookahead matters most, then left context;
    # blocks of at most 0.5 s (with 0.32 s blocks data/real stays 2.2 points off even at 2.4 s)
    "phone-ctc": LatencyPolicy(frame_seconds=0.02, default_latency=1.6, right_fraction=0.5, max_block_frames=25,
                               left_frames=50),
    # the demo BiLSTM encoders (80 ms frames; 1.6 s is the old fixed front end N=16, C=16, R=4): the
    # smallest latency within 2.0 points of whole-utterance WER on data/synth_test (demo-ctc: none
    # up to 2 s; 2 s is the closest)
    "demo-ctc": LatencyPolicy(0.08, 2.0, 0.2, 16, 16),
    "demo-rnnt": LatencyPolicy(0.08, 1.6, 0.2, 16, 16),
    "demo-tdt": LatencyPolicy(0.08, 1.2, 0.2, 16, 16),
}

#: the fixed front end of earlier versions (and of explicit frames: what is not given)
OLD_FRONT = BlockContext(16, 16, 4)


def latency_policy(bundle: Any) -> LatencyPolicy:
    """The :class:`LatencyPolicy` of ``bundle``: by its name (``phone-ctc:words=N`` is phone-ctc) for the
    bundled models, else the old fixed front end (``N=16, C=16, R=4`` at the default latency) on the
    bundle's ``frame_seconds``."""
    name = str(getattr(bundle, "name", "")).split(":")[0]
    frame = float(getattr(bundle, "frame_seconds", 0.08))
    policy = POLICIES.get(name)
    if policy is not None and math.isclose(policy.frame_seconds, frame):
        return policy
    return LatencyPolicy(frame, round(20 * frame, 6), 0.2, 16, 16)


def latency_in_force(decoder: Any) -> Optional[dict[str, Any]]:
    """The latency of the streams that name none (``StreamDecoder.latency_info()``: latency, block,
    left, right in seconds, frames, the model's default), for ``/v1/info``; ``None`` for a decoder
    that does not report one."""
    report = getattr(decoder, "latency_info", None)
    return report() if callable(report) else None
