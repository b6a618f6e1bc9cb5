"""Long files decoded offline in windows cut at pauses, each window decoded whole, results joined.

A wave longer than the model should see at once is cut into windows of at most
``max_window_seconds`` (tens of seconds: enough context for any bundled model) by
:func:`plan_windows`: each cut falls in the middle of the longest pause (a run of quiet 10 ms
frames, :func:`pause_runs`) between ``min_window_seconds`` and ``max_window_seconds`` after the
window's start. Where no pause is found, the window ends at ``max_window_seconds`` and the next
one starts ``overlap_seconds`` earlier; the two results are joined at the quietest frame of the
overlap (a token or word belongs to the window whose half it lies in). Each window is decoded
whole, exactly as :class:`~asrdecode.pipeline.Pipeline` decodes a file, and :func:`join_hypotheses`
shifts its token and word frames by the window's start, so times are the file's. Memory is that of
``batch`` windows, whatever the file's length. A file no longer than ``max_window_seconds`` is one
window: the same result as whole-file decoding.

Layers: above :mod:`asrdecode.pipeline`; used by the CLI (``transcribe --long-audio-seconds``)
and the server's ``POST /v1/audio/transcriptions``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from .audio import SAMPLE_RATE
from .errors import DecodingInputError, check_number
from .results import Hypothesis

__all__ = ["WindowConfig", "Window", "frame_energy_db", "pause_runs", "plan_windows", "join_hypotheses",
           "decode_long", "decode_files", "plan_files", "length_batches", "LONG_AUDIO_SECONDS", "BATCH_FILES",
           "BATCH_SECONDS"]

#: files longer than this are decoded in windows (``transcribe --long-audio-seconds``' default)
LONG_AUDIO_SECONDS = 60.0
#: :func:`decode_files` decodes the whole files in batches of at most this many files ...
BATCH_FILES = 16
#: ... and at most this much padded audio (batch size x its longest file; a longer file goes alone): memory
#: and padding bounded whatever the number and mix of files
BATCH_SECONDS = 120.0

#: hop of the energy analysis that finds pauses
ENERGY_HOP_SECONDS = 0.01


@dataclass(frozen=True)
class WindowConfig:
    """How a long wave is cut into windows (seconds).

    Attributes:
        max_window_seconds: longest window (the model decodes this much at once).
        min_window_seconds: a cut at a pause is not made earlier than this after the window's start.
        overlap_seconds: overlap of two windows cut where no pause was found.
        min_pause_seconds: the shortest quiet run that counts as a pause.
        quiet_below_db: a 10 ms frame is quiet this many dB below the file's speech level (its 95th
            percentile of frame energy), and at least 6 dB above its floor (the 5th percentile).
    """

    max_window_seconds: float = 30.0
    min_window_seconds: float = 10.0
    overlap_seconds: float = 4.0
    min_pause_seconds: float = 0.2
    quiet_below_db: float = 35.0

    def __post_init__(self) -> None:
        for name in ("max_window_seconds", "min_window_seconds", "overlap_seconds", "min_pause_seconds",
                     "quiet_below_db"):
            check_number(name, getattr(self, name), low=0.0, low_open=name != "overlap_seconds")
        if self.min_window_seconds > self.max_window_seconds:
            raise DecodingInputError(f"min_window_seconds ({self.min_window_seconds:g}) must be <= "
                                     f"max_window_seconds ({self.max_window_seconds:g})")
        if self.overlap_seconds >= self.min_window_seconds:
            raise DecodingInputError(f"overlap_seconds ({self.overlap_seconds:g}) must be < "
                                     f"min_window_seconds ({self.min_window_seconds:g})")


@dataclass(frozen=True)
class Window:
    """One window: samples ``[start, end)`` of the wave; its results are kept from sample ``keep_from``
    (``start`` unless the window overlaps the previous one) to ``keep_to`` (``end`` likewise)."""

    start: int
    end: int
    keep_from: int
    keep_to: int


def frame_energy_db(wave: torch.Tensor, hop: int) -> np.ndarray:
    """Energy in dB of consecutive ``hop``-sample frames of ``wave [N]`` -> ``[ceil(N / hop)]``."""
    x = wave.detach().to(torch.float32).cpu()
    n = math.ceil(x.numel() / hop) if x.numel() else 0
    x = torch.nn.functional.pad(x, (0, n * hop - x.numel()))
    power = x.view(n, hop).square().mean(dim=1).double().numpy()
    return 10.0 * np.log10(power + 1e-10)


def quiet_frames(energy_db: np.ndarray, quiet_below_db: float) -> np.ndarray:
    """Which frames are quiet (bool ``[F]``): below the speech level (95th percentile) minus
    ``quiet_below_db``, and never below the floor (5th percentile) + 6 dB."""
    if energy_db.size == 0:
        return np.zeros(0, dtype=bool)
    speech, floor = np.percentile(energy_db, 95), np.percentile(energy_db, 5)
    return energy_db < max(speech - quiet_below_db, floor + 6.0)


def pause_runs(quiet: np.ndarray, min_frames: int) -> list[tuple[int, int]]:
    """Runs ``(first, end_exclusive)`` of at least ``min_frames`` consecutive quiet frames."""
    edges = np.diff(np.concatenate(([0], quiet.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(s), int(e)) for s, e in zip(starts, ends) if e - s >= min_frames]


def _quietest(energy_db: np.ndarray, lo: int, hi: int, smooth: int = 10) -> int:
    """The frame in ``[lo, hi)`` whose ``smooth``-frame neighbourhood is quietest."""
    seg = energy_db[lo:hi]
    if seg.size <= smooth:
        return (lo + hi) // 2
    avg = np.convolve(seg, np.ones(smooth) / smooth, mode="same")
    return lo + int(np.argmin(avg))


def plan_windows(wave: torch.Tensor, config: WindowConfig = WindowConfig(), *, align: int = 1) -> list[Window]:
    """Cut ``wave [N]`` (16 kHz) into windows (see the module docstring); every boundary is a multiple of
    ``align`` samples (the model's frame, so that window offsets are whole frames)."""
    if not isinstance(wave, torch.Tensor) or wave.dim() != 1:
        raise DecodingInputError("wave must be a 1-D tensor [N] of 16 kHz samples")
    if isinstance(align, bool) or not isinstance(align, int) or align < 1:
        raise DecodingInputError(f"align must be an int >= 1 (samples per model frame), got {align!r}")
    n = wave.numel()
    max_w = int(config.max_window_seconds * SAMPLE_RATE)
    if n <= max_w:
        return [Window(0, n, 0, n)]
    hop = int(ENERGY_HOP_SECONDS * SAMPLE_RATE)
    energy = frame_energy_db(wave, hop)
    runs = pause_runs(quiet_frames(energy, config.quiet_below_db), max(1, round(config.min_pause_seconds / ENERGY_HOP_SECONDS)))
    min_w, overlap = int(config.min_window_seconds * SAMPLE_RATE), int(config.overlap_seconds * SAMPLE_RATE)

    def snap(sample: int) -> int:
        return min(n, max(0, (sample // align) * align))

    windows: list[Window] = []
    start, keep_from = 0, 0
    while n - start > max_w:
        lo, hi = (start + min_w) // hop, (start + max_w) // hop
        inside = [(s, e) for s, e in runs if s >= lo and e <= hi]
        if inside:
            s, e = max(inside, key=lambda r: (r[1] - r[0], r[0]))
            cut = snap((s + e) // 2 * hop)
            windows.append(Window(start, cut, keep_from, cut))
            start = keep_from = cut
        else:  # no pause: overlap the next window, join at the overlap's quietest frame
            end = snap(start + max_w)
            nxt = snap(end - overlap)
            join = snap(_quietest(energy, nxt // hop, end // hop) * hop)
            windows.append(Window(start, end, keep_from, join))
            start, keep_from = nxt, join
    windows.append(Window(start, n, keep_from, n))
    return windows


def _shift_keep(h: Hypothesis, offset: int, lo: int, hi: int) -> tuple[list[int], list[int], list[int], Optional[list[tuple[str, int, int]]]]:
    """The tokens (kept indices, shifted frames) and words of ``h`` whose frames, shifted by ``offset``,
    lie in ``[lo, hi)`` (a word by its middle frame)."""
    keep = [k for k, t in enumerate(h.timestamps) if lo <= t + offset < hi]
    words = None
    if h.words is not None:
        words = [(w, s + offset, e + offset) for w, s, e in h.words if lo <= (s + e) // 2 + offset < hi]
    return keep, [h.timestamps[k] + offset for k in keep], [h.tokens[k] for k in keep], words


def join_hypotheses(parts: Sequence[tuple[Hypothesis, int, int, int]], text_of: Callable[[list[int]], str]) -> Hypothesis:
    """One hypothesis of a wave from its windows' ``(hypothesis, offset, keep_lo, keep_hi)`` (frames: the
    window's first frame in the file; tokens and words kept when their file frame is in
    ``[keep_lo, keep_hi)``). ``text_of(tokens)`` spells tokens when the hypotheses have no words; with
    words, the text is the kept words joined by spaces (as the WFST and word beam decoders give it)."""
    tokens: list[int] = []
    stamps: list[int] = []
    durations: Optional[list[int]] = []
    words: Optional[list[tuple[str, int, int]]] = []
    score = 0.0
    for h, offset, lo, hi in parts:
        keep, shifted, toks, ws = _shift_keep(h, offset, lo, hi)
        tokens += toks
        stamps += shifted
        if durations is not None and h.durations is not None:
            durations += [h.durations[k] for k in keep]
        else:
            durations = None
        words = None if ws is None or words is None else words + ws
        score += float(h.score)
    if words is not None:
        text = " ".join(w for w, _, _ in words)
    else:
        text = text_of(tokens)
    return Hypothesis(tokens=tokens, timestamps=stamps, score=score,
                      durations=durations if durations else None, text=text, words=words)


def decode_long(pipeline: Any, wave: torch.Tensor, frame_seconds: float, text_of: Callable[[list[int]], str],
                config: WindowConfig = WindowConfig(), *, batch: int = 2,
                on_window: Optional[Callable[[float], None]] = None) -> Hypothesis:
    """The best hypothesis of ``wave [N]`` (16 kHz) decoded window by window with ``pipeline``
    (a :class:`~asrdecode.pipeline.Pipeline`), ``batch`` windows per call; ``frame_seconds`` is the
    model's frame (window offsets are whole frames); ``on_window(seconds)`` is told the audio done."""
    check_number("frame_seconds", frame_seconds, low=0.0, low_open=True)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise DecodingInputError(f"batch must be an int >= 1, got {batch!r}")
    per_frame = round(frame_seconds * SAMPLE_RATE)
    if per_frame < 1 or abs(per_frame - frame_seconds * SAMPLE_RATE) > 1e-6:
        raise DecodingInputError(f"frame_seconds must be a whole number of 16 kHz samples, got {frame_seconds!r}")
    windows = plan_windows(wave, config, align=per_frame)
    parts: list[tuple[Hypothesis, int, int, int]] = []
    with torch.inference_mode():
        for i in range(0, len(windows), batch):
            group = windows[i:i + batch]
            hyps = pipeline.decode(*pipeline.encode([wave[w.start:w.end] for w in group]))
            for w, h in zip(group, hyps):
                hi = sys.maxsize if w.keep_to >= wave.numel() else w.keep_to // per_frame
                parts.append((h, w.start // per_frame, w.keep_from // per_frame, hi))
                if on_window is not None:
                    on_window((w.keep_to - w.keep_from) / SAMPLE_RATE)
    return join_hypotheses(parts, text_of)


def length_batches(lengths: Sequence[int], max_items: int, max_padded: int) -> list[list[int]]:
    """Indices of ``lengths`` in batches of similar lengths (longest first): at most ``max_items`` each, and at
    most ``max_padded`` in all once padded to the batch's longest (a longer item alone)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < max_items and (len(out[-1]) + 1) * lengths[out[-1][0]] <= max_padded:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def plan_files(sizes: Sequence[int], long_audio_seconds: Optional[float] = LONG_AUDIO_SECONDS, *,
               batch_files: int = BATCH_FILES, batch_seconds: float = BATCH_SECONDS) -> tuple[list[list[int]], list[int]]:
    """How :func:`decode_files` decodes waves of ``sizes`` samples: ``(batches, long)``, the indices of the whole
    waves (no longer than ``long_audio_seconds``; ``None``: all) in :func:`length_batches`, and those decoded
    in windows. One pipeline call per batch, and per window group of each long wave."""
    if isinstance(batch_files, bool) or not isinstance(batch_files, int) or batch_files < 1:
        raise DecodingInputError(f"batch_files must be an int >= 1, got {batch_files!r}")
    check_number("batch_seconds", batch_seconds, low=0.0, low_open=True)
    limit = None if long_audio_seconds is None else int(long_audio_seconds * SAMPLE_RATE)
    long = [i for i, n in enumerate(sizes) if limit is not None and n > limit]
    short = [i for i, n in enumerate(sizes) if limit is None or n <= limit]
    batches = length_batches([sizes[i] for i in short], batch_files, int(batch_seconds * SAMPLE_RATE))
    return [[short[j] for j in group] for group in batches], long


def decode_files(bundle: Any, pipeline: Any, waves: list[torch.Tensor], nbest: int = 1, *,
                 long_audio_seconds: Optional[float] = LONG_AUDIO_SECONDS,
                 config: WindowConfig = WindowConfig(), on_audio: Optional[Callable[[float], None]] = None,
                 batch_files: int = BATCH_FILES, batch_seconds: float = BATCH_SECONDS) -> list[list[Hypothesis]]:
    """Each wave's n-best list (``nbest`` long at most) as ``asrdecode transcribe`` gives it: the waves no
    longer than ``long_audio_seconds`` (``None``: all) in batched ``pipeline`` calls of similar lengths
    (:func:`plan_files`, :func:`length_batches`: ``batch_files`` waves and ``batch_seconds`` of padded audio at
    most), each longer one through :func:`decode_long` (a list of one; ``nbest > 1`` with a long wave is an error).
    ``on_audio(seconds)`` is told the audio done, batch by batch and window by window."""
    batches, long = plan_files([w.numel() for w in waves], long_audio_seconds, batch_files=batch_files,
                               batch_seconds=batch_seconds)
    if long and nbest > 1:
        raise DecodingInputError(f"nbest {nbest}: files over {long_audio_seconds:g} s are decoded in windows "
                                 "joined into one hypothesis; raise the long-audio threshold")
    hyps: list[list[Hypothesis]] = [[] for _ in waves]
    for ids in batches:
        with torch.inference_mode():
            for i, h in zip(ids, pipeline.decode_nbest(*pipeline.encode([waves[i] for i in ids]))):
                hyps[i] = h
        if on_audio is not None:
            on_audio(sum(waves[i].numel() for i in ids) / SAMPLE_RATE)
    for i in long:
        hyps[i] = [decode_long(pipeline, waves[i], bundle.frame_seconds, bundle.tokenizer.decode, config,
                               on_window=on_audio)]
    return hyps
