"""Audio reading and resampling for the bundled models."""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode.audio import pad_batch, read_audio, resample
from asrdecode.errors import DecodingInputError, FileFormatError


def _write(path: Path, x: np.ndarray, sr: int, width: int = 2, channels: int = 1) -> None:
    if width == 2:
        raw = (np.clip(x, -1, 1) * 32767).astype("<i2")
    elif width == 1:
        raw = (np.clip(x, -1, 1) * 127 + 128).astype(np.uint8)
    else:
        raw = (np.clip(x, -1, 1) * (2**31 - 1)).astype("<i4")
    if channels == 2:
        raw = np.repeat(raw, 2)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(sr)
        f.writeframes(raw.tobytes())


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("channels", [1, 2])
def test_read_pcm_wav_widths_and_channels(tmp_path: Path, width: int, channels: int) -> None:
    t = np.arange(1600) / 16000
    x = 0.5 * np.sin(2 * np.pi * 300 * t)
    p = tmp_path / "a.wav"
    _write(p, x, 16000, width, channels)
    y = read_audio(p)
    assert y.dtype == torch.float32 and y.shape == (1600,)
    tol = 0.02 if width == 1 else 1e-3
    assert np.abs(y.numpy() - x).max() < tol


def test_read_resamples_to_16k(tmp_path: Path) -> None:
    sr = 22050
    t = np.arange(sr) / sr
    x = 0.5 * np.sin(2 * np.pi * 440 * t)
    p = tmp_path / "b.wav"
    _write(p, x, sr)
    y = read_audio(p)
    assert y.shape == (16000,)
    ref = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    assert np.abs(y.numpy()[200:-200] - ref[200:-200]).max() < 2e-3


def test_resample_removes_content_above_new_nyquist() -> None:
    sr = 48000
    t = torch.arange(sr, dtype=torch.float64) / sr
    x = (torch.sin(2 * math.pi * 1000 * t) + torch.sin(2 * math.pi * 12000 * t)).float()
    y = resample(x, sr, 16000)  # 12 kHz is above the new 8 kHz Nyquist: must be filtered out
    ref = torch.sin(2 * math.pi * 1000 * torch.arange(16000) / 16000)
    assert (y[400:-400] - ref[400:-400]).abs().max() < 0.02


def test_resample_identity_and_bad_args() -> None:
    x = torch.randn(100)
    assert torch.equal(resample(x, 16000, 16000), x)
    with pytest.raises(DecodingInputError, match="sample rates"):
        resample(x, 0, 16000)
    with pytest.raises(DecodingInputError, match="audio"):
        resample(torch.randn(2, 100), 8000, 16000)
    with pytest.raises(DecodingInputError, match="differ by more than x48"):
        resample(x, 1000, 384_000)
    with pytest.raises(DecodingInputError, match="orig_sr must be an int"):
        resample(x, 16000.5, 16000)
    with pytest.raises(DecodingInputError, match="taps"):
        resample(x, 8000, 16000, taps=10**9)


def test_resample_work_bound(monkeypatch) -> None:
    import asrdecode.audio as audio_mod

    monkeypatch.setattr(audio_mod, "MAX_RESAMPLE_WORK", 10**5)
    with pytest.raises(DecodingInputError, match="filter taps, over the bound"):
        resample(torch.randn(8000), 8000, 16000)  # 16000 outputs x 49 taps
    assert resample(torch.randn(800), 8000, 16000).shape == (1600,)  # 1600 x 49 taps


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="no such audio file"):
        read_audio(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"this is not audio at all")
    with pytest.raises(FileFormatError):
        read_audio(bad)


def test_pad_batch() -> None:
    x, n = pad_batch([torch.ones(3), torch.ones(5)])
    assert x.shape == (2, 5) and n.tolist() == [3, 5] and x[0, 3:].abs().sum() == 0
    with pytest.raises(DecodingInputError, match="audios"):
        pad_batch([])
    with pytest.raises(DecodingInputError, match=r"audios\[1\]"):
        pad_batch([torch.ones(3), torch.ones(2, 2)])


@pytest.mark.parametrize("sr", [1, 8, 999, 1000, 7999, 384_001, 2**31 - 1])
def test_implausible_sample_rate_is_a_named_error(tmp_path: Path, sr: int) -> None:
    """A header claiming 1 Hz (or 1000 Hz) would be upsampled x16000 (x16): refused, naming the file."""
    p = tmp_path / "rate.wav"
    _write(p, np.zeros(8000), sr)
    with pytest.raises(FileFormatError, match=r"rate\.wav: sample rate .* outside 8000\.\.384000 Hz"):
        read_audio(p)


@pytest.mark.parametrize("sr", [8000, 44_100, 384_000])
def test_sample_rate_bounds_are_inclusive(tmp_path: Path, sr: int) -> None:
    p = tmp_path / "ok.wav"
    _write(p, np.zeros(sr // 100), sr)
    assert read_audio(p).shape == (160,)


@pytest.mark.parametrize("cut", [1, 2, 1000, 3199])
@pytest.mark.parametrize("channels", [1, 2])
def test_truncated_data_chunk_is_a_named_error(tmp_path: Path, cut: int, channels: int) -> None:
    """A wav cut short (its header declares more data than the file holds) is an error, never decoded silently."""
    p = tmp_path / "cut.wav"
    _write(p, 0.1 * np.ones(1600), 16000, channels=channels)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - cut])
    with pytest.raises(FileFormatError, match=r"cut\.wav: truncated wav data chunk: the header declares 1600 frames"):
        read_audio(p)


def test_header_declaring_gigabytes_reads_only_the_file(tmp_path: Path) -> None:
    p = tmp_path / "big.wav"
    _write(p, np.zeros(100), 16000)
    data = bytearray(p.read_bytes())
    data[40:44] = (0xFFFFFFF0).to_bytes(4, "little")  # data chunk size
    p.write_bytes(bytes(data))
    with pytest.raises(FileFormatError, match="truncated wav data chunk"):
        read_audio(p)


def test_zero_channels_is_a_named_error(tmp_path: Path) -> None:
    p = tmp_path / "ch.wav"
    _write(p, np.zeros(100), 16000)
    data = bytearray(p.read_bytes())
    data[22:24] = (0).to_bytes(2, "little")
    p.write_bytes(bytes(data))
    with pytest.raises(FileFormatError, match=r"ch\.wav"):
        read_audio(p)
