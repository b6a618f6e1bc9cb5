"""Audio input for the bundled models: wav reading and resampling to 16 kHz.

Only the standard library (``wave``) and torch are needed for PCM wav files; other formats
(flac, ogg, float wav) are read with ``soundfile`` when it is installed.

Files are not trusted: a sample rate outside ``MIN_SAMPLE_RATE..MAX_SAMPLE_RATE`` (8 kHz, the
telephone rate, to 384 kHz) is an error (a header claiming 1000 Hz would otherwise be upsampled
x16: a 23 MB file took 1024 CPU-seconds and 1.9 GB), and so is a
PCM wav whose data chunk holds fewer bytes than its header declares (a truncated file is never
decoded silently as a shorter one; a header declaring one of :data:`STREAMED_WAV_SIZES` bytes, as a WAV written
to a pipe has, means "to the end of the file"), and so are NaN / inf samples or samples beyond
:data:`MAX_ABS_SAMPLE` (a float wav may hold them; decoded, they gave an empty transcript or an error
about the model's output). All raise :class:`~asrdecode.errors.FileFormatError` naming the file.

:func:`check_waveform` is the one rule for every waveform a model or a stream is given: finite, and at
most :data:`MAX_ABS_SAMPLE` in magnitude.
"""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path

import numpy as np
import torch

from .errors import DecodingInputError, FileFormatError, check_int

__all__ = ["SAMPLE_RATE", "MAX_ABS_SAMPLE", "check_waveform", "MIN_SAMPLE_RATE", "MAX_SAMPLE_RATE", "MAX_RESAMPLE_RATIO", "MAX_RESAMPLE_WORK",
           "read_audio", "resample", "pad_batch"]

SAMPLE_RATE = 16000
#: the data chunk sizes a WAV writer puts in the header when it cannot go back to fill it in, writing to a pipe
#: (ffmpeg 5: 0xFFFFFFFF; sox 14.4 from an input of unknown length: 0xFFFFFFFE): the samples run to the end of
#: the file
STREAMED_WAV_SIZES = (0xFFFFFFFF, 0xFFFFFFFE)
#: libsndfile's frame count of a file whose header does not state its length (a FLAC written to a pipe)
UNKNOWN_FRAMES = 2**62
#: largest accepted ``|sample|``: audio is float in [-1, 1]; 60 dB of headroom for unnormalised
#: float audio; the log-mel front end stays finite up to about 1e17 and gives NaN from about 1e18.
MAX_ABS_SAMPLE = 1000.0
MIN_SAMPLE_RATE = 8_000
MAX_SAMPLE_RATE = 384_000
#: the largest ratio between the two rates of a resampling (8 kHz <-> 384 kHz)
MAX_RESAMPLE_RATIO = MAX_SAMPLE_RATE // MIN_SAMPLE_RATE
#: the most filter taps one resampling may evaluate (output samples x taps each): ~10 h of 44.1 kHz
#: audio to 16 kHz; beyond it resample() raises instead of running for hours
MAX_RESAMPLE_WORK = 10**11


def check_waveform(name: str, wave: torch.Tensor) -> None:
    """Raise :class:`DecodingInputError` naming ``name`` if ``wave [N]`` holds NaN / inf samples or
    samples beyond :data:`MAX_ABS_SAMPLE` in magnitude (one host read)."""
    if not wave.numel():
        return
    peak = float(wave.detach().abs().amax())  # NaN wherever a sample is NaN
    if not math.isfinite(peak):
        raise DecodingInputError(f"{name} contains NaN or inf samples")
    if peak > MAX_ABS_SAMPLE:
        raise DecodingInputError(f"{name} has samples of magnitude {peak:.3g}; audio must be float in [-1, 1] "
                                 f"(at most {MAX_ABS_SAMPLE:g} accepted)")


def _read_pcm_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as f:
        sr = f.getframerate()
        ch = f.getnchannels()
        width = f.getsampwidth()
        _check_sample_rate(path, sr)
        if ch < 1:
            raise FileFormatError(path, None, f"wav header declares {ch} channels")
        if width not in (1, 2, 3, 4):
            raise FileFormatError(path, None, f"unsupported wav sample width {width} bytes")
        frame_bytes = width * ch
        declared = f.getnframes()
        # never ask for more than the file can hold: a header may declare gigabytes
        raw = f.readframes(min(declared, path.stat().st_size // frame_bytes + 1))
    if any(declared == size // frame_bytes for size in STREAMED_WAV_SIZES):  # written to a pipe: length unknown
        raw = raw[: len(raw) - len(raw) % frame_bytes]
    elif len(raw) != declared * frame_bytes:
        raise FileFormatError(
            path, None, f"truncated wav data chunk: the header declares {declared} frames "
            f"({declared * frame_bytes} bytes), the file holds {len(raw) // frame_bytes} "
            f"({len(raw)} bytes)")
    if width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v & (1 << 23), v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = np.frombuffer(raw, dtype="<i4").astype(np.float32) / float(1 << 31)
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    return x, sr


def _check_sample_rate(path: Path, sr: int) -> None:
    if not MIN_SAMPLE_RATE <= sr <= MAX_SAMPLE_RATE:
        raise FileFormatError(path, None, f"sample rate {sr} Hz is outside {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz")


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """Read a mono (or down-mixed) audio file and resample it -> float32 tensor ``[N]`` in [-1, 1].

    PCM wav files need only the standard library; other formats need ``soundfile``.
    Raises :class:`FileFormatError` (naming the file) for unreadable files, a sample rate outside
    8 kHz..384 kHz, a PCM wav whose data chunk is shorter than its header declares, and samples that
    :func:`check_waveform` refuses (NaN, inf, beyond :data:`MAX_ABS_SAMPLE`).
    """
    p = Path(path)
    if not p.is_file():
        raise FileFormatError(p, None, "no such audio file")
    if p.stat().st_size == 0:
        raise FileFormatError(p, None, "empty file (0 bytes): not audio")
    try:
        x, sr = _read_pcm_wav(p)
    except FileFormatError:
        raise
    except (wave.Error, EOFError, RuntimeError, ValueError, OverflowError, struct.error) as err:
        # not a (well-formed) PCM wav: the wave module also raises bare RuntimeError / ValueError /
        # struct.error on malformed chunk headers; soundfile gets a try at every such file
        try:
            import soundfile as sf
        except ImportError:
            raise FileFormatError(
                p, None, f"not a PCM wav file ({err}); install `soundfile` to read other formats"
            ) from None
        try:
            with sf.SoundFile(str(p)) as f:
                unknown = f.frames >= UNKNOWN_FRAMES
                if not unknown:
                    data, sr = f.read(dtype="float32", always_2d=True), f.samplerate
                kind = f.format
        except Exception as err2:  # soundfile raises its own RuntimeError subclasses
            raise FileFormatError(p, None, f"cannot read audio: {err2}") from None
        if unknown:  # libsndfile cannot read such a file to its end (a seek past it fails)
            raise FileFormatError(p, None, f"this {kind} file does not state its length (it was written to a "
                                           "pipe); write WAV to the pipe instead (ffmpeg ... -f wav -)") from None
        _check_sample_rate(p, int(sr))
        x = data.mean(axis=1)
    audio = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    try:
        check_waveform("the audio", audio)
    except DecodingInputError as err:
        raise FileFormatError(p, None, str(err)) from None
    return resample(audio, int(sr), sample_rate)


def resample(audio: torch.Tensor, orig_sr: int, new_sr: int, taps: int = 24) -> torch.Tensor:
    """Band-limited (Hann-windowed sinc) resampling of ``audio [N]`` from ``orig_sr`` to ``new_sr``.

    Returns ``[round(N * new_sr / orig_sr)]``. ``taps`` is the one-sided filter half-width in
    input samples at the lower of the two rates.

    The cost is bounded: rates whose ratio exceeds :data:`MAX_RESAMPLE_RATIO` (48), or a length
    needing over :data:`MAX_RESAMPLE_WORK` filter taps, raise :class:`DecodingInputError`.
    """
    if not isinstance(audio, torch.Tensor) or audio.dim() != 1:
        raise DecodingInputError("audio must be a 1-D tensor [N]")
    for name, value in (("orig_sr", orig_sr), ("new_sr", new_sr), ("taps", taps)):
        check_int(name, value)
    if orig_sr <= 0 or new_sr <= 0:
        raise DecodingInputError(f"sample rates must be positive, got orig_sr={orig_sr}, new_sr={new_sr}")
    if not 1 <= taps <= 1024:
        raise DecodingInputError(f"taps must be in 1..1024, got {taps}")
    if orig_sr == new_sr or audio.numel() == 0:
        return audio.to(torch.float32)
    if max(orig_sr, new_sr) > MAX_RESAMPLE_RATIO * min(orig_sr, new_sr):
        raise DecodingInputError(f"sample rates orig_sr={orig_sr}, new_sr={new_sr} differ by more than "
                                 f"x{MAX_RESAMPLE_RATIO} (the resampling cost grows with the ratio)")
    x = audio.to(torch.float64)
    n_out = int(round(audio.numel() * new_sr / orig_sr))
    cutoff = min(1.0, new_sr / orig_sr)  # relative to the input Nyquist
    half = int(math.ceil(taps / cutoff))
    if n_out * (2 * half + 1) > MAX_RESAMPLE_WORK:
        raise DecodingInputError(f"resampling {audio.numel()} samples from {orig_sr} to {new_sr} Hz needs "
                                 f"{n_out * (2 * half + 1):.3g} filter taps, over the bound {MAX_RESAMPLE_WORK:.0e}; "
                                 "split the audio")
    out = torch.empty(n_out, dtype=torch.float64)
    chunk = 1 << 14
    offsets = torch.arange(-half, half + 1, dtype=torch.float64)
    for start in range(0, n_out, chunk):
        pos = torch.arange(start, min(start + chunk, n_out), dtype=torch.float64) * (orig_sr / new_sr)
        base = torch.floor(pos)
        idx = base.unsqueeze(1) + offsets  # [n, 2*half+1]
        d = pos.unsqueeze(1) - idx
        w = cutoff * torch.sinc(cutoff * d) * 0.5 * (1 + torch.cos(math.pi * d / (half + 1)))
        valid = (idx >= 0) & (idx < x.numel())
        vals = x[idx.clamp(0, x.numel() - 1).long()] * valid
        out[start : start + pos.numel()] = (vals * w).sum(dim=1)
    return out.to(torch.float32)


def pad_batch(audios: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a list of 1-D waveforms -> (``[B, N_max]`` float32, lengths ``[B]`` int64)."""
    if not isinstance(audios, (list, tuple)) or not audios:
        raise DecodingInputError("audios must be a non-empty list of 1-D tensors")
    for i, a in enumerate(audios):
        if not isinstance(a, torch.Tensor) or a.dim() != 1:
            raise DecodingInputError(f"audios[{i}] must be a 1-D tensor [N]")
    lengths = torch.tensor([a.numel() for a in audios], dtype=torch.long)
    out = torch.zeros(len(audios), int(lengths.max()), dtype=torch.float32)
    for i, a in enumerate(audios):
        out[i, : a.numel()] = a.to(torch.float32)
    return out, lengths
