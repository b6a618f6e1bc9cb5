"""A chunked front end for the bundled models: audio blocks of a fixed number of encoder frames.

The demo models' encoder is a BiLSTM over the whole utterance, which cannot stream exactly. The
streaming front end therefore defines its own, block-wise encoding, and :meth:`StreamDecoder.offline
<asrdecode.streaming.StreamDecoder.offline>` uses the same one, so the streamed result can equal the
offline one exactly:

- encoder frame ``j`` (80 ms) covers samples ``[1280 j, 1280 (j + 1))``;
- block ``k`` outputs encoder frames ``[k N, (k + 1) N)`` (``N = block_frames``). It is computed from
  the audio window ``[1280 (k N - C'), 1280 ((k + 1) N + R))`` with ``C' = min(C, k N)`` frames of
  left context and ``R`` of right context (lookahead): the bundle's features of the window (at most
  ``feature_frames_per_frame`` per encoder frame: a hama phone frame centred on the window end
  belongs to the next frame and is dropped), then the encoder over those frames; the outputs of
  the context frames are dropped;
- a block is encoded once more than its window's samples have been received (so a block is never
  recomputed); when the stream ends, the blocks whose window ends before the audio does are encoded
  the same way, and the rest of the audio (from the next block start, with left context) is one last
  window whose every output frame past the context is kept (up to ``N + R + 1`` frames).

Every window is encoded alone (batch 1): the demo encoder's output depends, in the last float bits,
on the batch it is run in, and batch-1 windows make the streamed frames bitwise equal to the offline
ones. The cost of the blocks against whole-utterance encoding is measured by
``benchmarks/stream_frontend.py`` (see ``docs/serving.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from ..errors import DecodingInputError, check_int
from ..audio import SAMPLE_RATE, check_waveform

if TYPE_CHECKING:
    from ..models.bundle import ModelBundle

__all__ = ["BlockFrontEnd", "AudioBuffer", "check_audio", "SAMPLES_PER_FRAME"]

SAMPLES_PER_FRAME = 1280  # one 80 ms encoder frame of the bundled models at 16 kHz


def check_audio(name: str, audio: object) -> torch.Tensor:
    """A 1-D float waveform (numpy or torch, float32 or float64, accepted by
    :func:`~asrdecode.audio.check_waveform`) as a float32 CPU tensor."""
    if isinstance(audio, np.ndarray):
        if audio.dtype not in (np.float32, np.float64):
            raise DecodingInputError(f"{name} must be float32 audio in [-1, 1], got numpy dtype {audio.dtype}")
        audio = torch.from_numpy(np.ascontiguousarray(audio))
    if not isinstance(audio, torch.Tensor):
        raise DecodingInputError(f"{name} must be a 1-D float32 numpy array or torch tensor, got {type(audio).__name__}")
    if audio.dtype not in (torch.float32, torch.float64):
        raise DecodingInputError(f"{name} must be float32 audio in [-1, 1], got dtype {audio.dtype}")
    if audio.dim() != 1:
        raise DecodingInputError(f"{name} must be 1-D (one channel, 16 kHz samples), got shape {tuple(audio.shape)}")
    check_waveform(name, audio)
    return audio.detach().to(device="cpu", dtype=torch.float32)


@dataclass
class AudioBuffer:
    """One stream's audio not yet fully used: ``samples`` start at global sample ``start``.

    ``received``: samples received so far; ``next_frame``: first encoder frame of the next block.
    """

    samples: torch.Tensor
    start: int = 0
    received: int = 0
    next_frame: int = 0

    @staticmethod
    def empty() -> "AudioBuffer":
        return AudioBuffer(torch.zeros(0, dtype=torch.float32))


@dataclass
class _Window:
    """Audio of one block: ``audio`` plus ``context`` left-context frames to drop from the output,
    ``features`` feature frames to keep (``None``: all, the stream's last window) and ``keep`` output
    frames (``None``: all after the context)."""

    audio: torch.Tensor
    context: int
    features: int | None
    keep: int | None


class BlockFrontEnd:
    """Block-wise encoding of a demo bundle's audio (see the module docstring).

    Args:
        bundle: a :class:`~asrdecode.models.DemoModel` (``features`` / ``encode_features`` /
            ``feature_frames_per_frame`` / ``feature_dim``).
        head: maps encoder output ``[1, T, D]`` to the frames the decoder reads (identity for a
            transducer, the CTC head's log-probs for ``demo-ctc``); applied per window.
        block_frames, left_context, right_context: ``N``, ``C``, ``R`` in encoder frames.
    """

    def __init__(
        self,
        bundle: ModelBundle,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
        block_frames: int = 16,
        left_context: int = 16,
        right_context: int = 4,
    ) -> None:
        for name, value, low in (("block_frames", block_frames, 1), ("left_context", left_context, 0),
                                 ("right_context", right_context, 0)):
            check_int(name, value, low=low)
        self.bundle = bundle
        self.head = head
        self.block_frames = block_frames
        self.left_context = left_context
        self.right_context = right_context
        #: audio samples per encoder frame (1280 for the bundled 80 ms models)
        self.samples_per_frame = int(round(float(bundle.frame_seconds) * SAMPLE_RATE))
        if self.samples_per_frame < 1:
            raise DecodingInputError(f"bundle.frame_seconds is too small: {bundle.frame_seconds!r}")

    # -- windows -----------------------------------------------------------------------------------

    def push(self, buf: AudioBuffer, audio: torch.Tensor) -> None:
        """Append ``audio`` (a checked float32 waveform) to the stream's buffer."""
        if audio.numel():
            buf.samples = torch.cat([buf.samples, audio])
            buf.received += audio.numel()

    def _window(self, buf: AudioBuffer, first: int, end: int | None) -> _Window:
        """The window of the block starting at frame ``first``; ``end`` its last sample (exclusive),
        ``None`` for the stream's last window (to the end of the audio)."""
        ctx = min(self.left_context, first)
        lo = (first - ctx) * self.samples_per_frame - buf.start
        if end is None:
            return _Window(buf.samples[lo:], ctx, None, None)
        frames = ctx + self.block_frames + self.right_context
        per = self.bundle.feature_frames_per_frame
        return _Window(buf.samples[lo : end - buf.start], ctx, frames * per, self.block_frames)

    def take_windows(self, buf: AudioBuffer, final: bool) -> list[_Window]:
        """The windows of every block that can be encoded now (all the rest when ``final``);
        advances the buffer and drops the samples no later block needs."""
        out = []
        while True:
            end = (buf.next_frame + self.block_frames + self.right_context) * self.samples_per_frame
            if buf.received > end:
                out.append(self._window(buf, buf.next_frame, end))
                buf.next_frame += self.block_frames
                continue
            if final:
                out.append(self._window(buf, buf.next_frame, None))
            break
        keep_from = max(buf.next_frame - self.left_context, 0) * self.samples_per_frame
        if keep_from > buf.start:
            buf.samples = buf.samples[keep_from - buf.start :].clone()
            buf.start = keep_from
        return out

    # -- encoding ----------------------------------------------------------------------------------

    @torch.inference_mode()
    def encode(self, window: _Window) -> torch.Tensor:
        """The output frames ``[n, F]`` of one window (``n`` may be 0)."""
        empty = self._empty()
        if window.audio.numel() == 0:
            return empty
        feats, flen = self.bundle.features([window.audio])
        n = int(flen[0]) if window.features is None else min(int(flen[0]), window.features)
        if n <= window.context * self.bundle.feature_frames_per_frame:
            return empty
        enc, _ = self.bundle.encode_features(feats[:, :n], torch.tensor([n]))
        out = enc if self.head is None else self.head(enc)
        stop = None if window.keep is None else window.context + window.keep
        return out[0, window.context : stop]

    def _empty(self) -> torch.Tensor:
        width = getattr(self, "_width", None)
        if width is None:
            per = self.bundle.feature_frames_per_frame
            feats = torch.zeros(1, per, self.bundle.feature_dim)
            enc, _ = self.bundle.encode_features(feats, torch.tensor([per]))
            width = self._width = (enc if self.head is None else self.head(enc)).shape[-1]
        return torch.zeros(0, width)

    def frames(self, buf: AudioBuffer, final: bool) -> torch.Tensor:
        """Encode every block that is ready (see :meth:`take_windows`): frames ``[n, F]``."""
        parts = [self.encode(w) for w in self.take_windows(buf, final)]
        return torch.cat(parts) if parts else self._empty()

    def encode_utterance(self, audio: torch.Tensor) -> torch.Tensor:
        """The frames of a whole waveform, block by block exactly as a stream gets them."""
        buf = AudioBuffer.empty()
        self.push(buf, audio)
        return self.frames(buf, final=True)
