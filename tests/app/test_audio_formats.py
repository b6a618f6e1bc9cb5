"""Compressed and float audio files decode like the PCM wav they came from (soundfile is a core dependency)."""

import struct

import numpy as np
import pytest
import soundfile as sf
import torch

from asrdecode.audio import read_audio
from asrdecode.errors import FileFormatError


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return read_audio("data/real/cards-001.wav").numpy()  # 16 kHz float32


@pytest.mark.parametrize("fmt, subtype, tol", [("FLAC", "PCM_16", 1e-4), ("WAV", "FLOAT", 1e-6),
                                                ("OGG", "VORBIS", 0.2), ("MP3", "MPEG_LAYER_III", 0.2)])
def test_formats_read_as_the_same_samples(tmp_path, speech, fmt, subtype, tol):
    path = tmp_path / f"a.{fmt.lower()}"
    sf.write(str(path), speech, 16000, format=fmt, subtype=subtype)
    got = read_audio(path).numpy()
    if fmt in ("OGG", "MP3"):  # lossy, and an MP3 encoder pads the start: compare energy and length
        assert abs(len(got) - len(speech)) < 0.1 * 16000
        n = min(len(got), len(speech))
        assert np.sqrt(np.mean(got[:n] ** 2)) == pytest.approx(np.sqrt(np.mean(speech[:n] ** 2)), rel=tol)
    else:
        assert got.shape == speech.shape
        assert np.max(np.abs(got - speech)) < tol


def test_stereo_48k_flac_is_downmixed_and_resampled(tmp_path, speech):
    path = tmp_path / "stereo.flac"
    up = torch.nn.functional.interpolate(torch.from_numpy(speech)[None, None], scale_factor=3, mode="linear")[0, 0]
    sf.write(str(path), np.stack([up.numpy(), up.numpy()], axis=1), 48000, format="FLAC")
    got = read_audio(path)
    assert abs(got.numel() - len(speech)) <= 1


def test_garbage_file_is_a_named_error(tmp_path):
    path = tmp_path / "noise.ogg"
    path.write_bytes(b"OggS" + bytes(range(200)))
    with pytest.raises(FileFormatError, match="noise.ogg"):
        read_audio(path)


def test_zero_byte_file_says_it_is_empty(tmp_path):
    path = tmp_path / "zero.wav"
    path.write_bytes(b"")
    with pytest.raises(FileFormatError, match=r"zero.wav.*empty file \(0 bytes\)"):
        read_audio(path)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e4])
def test_float_wav_with_unusable_samples_is_a_named_error(tmp_path, value):
    """A float wav may hold NaN, inf or samples far beyond [-1, 1]: refused naming the file (decoded, NaN
    gave phone-ctc an empty transcript and the other models an error about their output)."""
    x = np.zeros(1600, np.float32)
    x[800] = value
    sf.write(tmp_path / "odd.wav", x, 16000, subtype="FLOAT")
    match = "NaN or inf" if not np.isfinite(value) else "magnitude 1e\\+04"
    with pytest.raises(FileFormatError, match=f"odd.wav: the audio .*{match}"):
        read_audio(tmp_path / "odd.wav")
    x[800] = 999.0  # loud but within the accepted headroom
    sf.write(tmp_path / "loud.wav", x, 16000, subtype="FLOAT")
    assert float(read_audio(tmp_path / "loud.wav").max()) == 999.0


def _streamed_wav(samples: np.ndarray, channels: int, width: int, size: int, tail: bytes = b"") -> bytes:
    """A PCM WAV of ``width``-byte samples as a writer to a pipe leaves it: its data size ``size`` (ffmpeg
    ``-f wav -``: 0xFFFFFFFF in the RIFF and data sizes; sox 14.4: 0xFFFFFFFE in the data size)."""
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, 16000, 16000 * width * channels, width * channels, 8 * width)
    body = samples.astype("<i4").tobytes() if width == 4 else (
        samples.astype("<i2").tobytes() if width == 2 else
        b"".join(int(v).to_bytes(3, "little", signed=True) for v in samples))
    return (b"RIFF" + struct.pack("<I", size) + b"WAVE" + b"fmt " + fmt + b"data" + struct.pack("<I", size)
            + body + tail)


@pytest.mark.parametrize("channels, width", [(1, 2), (2, 2), (1, 3), (2, 3)])
@pytest.mark.parametrize("size", [0xFFFFFFFF, 0xFFFFFFFE])
def test_a_wav_written_to_a_pipe_runs_to_the_end_of_the_file(tmp_path, channels, width, size):
    """Its header cannot say the length (the writer could not go back): it was refused as truncated."""
    pcm = (np.sin(np.arange(8000) / 7.0) * 12000).astype(np.int16)
    scale = 1 << (8 * width - 16)
    path = tmp_path / "piped.wav"
    path.write_bytes(_streamed_wav(np.repeat(pcm.astype(np.int64) * scale, channels), channels, width, size,
                                   tail=b"\x01"))  # a stray byte: no whole frame
    got = read_audio(path)
    assert got.shape == (8000,)
    assert torch.allclose(got, torch.from_numpy(pcm / 32768.0).float(), atol=1e-6)
    normal = tmp_path / "normal.wav"  # an ordinary header still guards against truncation
    body = pcm.tobytes()
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    normal.write_bytes(b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVE" + b"fmt " + fmt + b"data"
                       + struct.pack("<I", len(body)) + body[:-100])
    with pytest.raises(FileFormatError, match="truncated wav data chunk"):
        read_audio(normal)


def test_a_flac_without_its_length_is_a_named_error(tmp_path, speech):
    """A FLAC written to a pipe says 0 samples in its STREAMINFO (unknown); libsndfile cannot read it to its end.
    Before: numpy's "array is too big"; now a message saying why and what to pipe instead."""
    path = tmp_path / "piped.flac"
    sf.write(path, speech, 16000, subtype="PCM_16")
    raw = bytearray(path.read_bytes())
    assert raw[:4] == b"fLaC"
    at = 8 + 10  # the STREAMINFO field holding rate, channels, bits and the 36-bit sample count
    field = int.from_bytes(raw[at:at + 8], "big")
    assert field & ((1 << 36) - 1) == speech.size
    raw[at:at + 8] = (field & ~((1 << 36) - 1)).to_bytes(8, "big")
    path.write_bytes(bytes(raw))
    with pytest.raises(FileFormatError, match=r"piped\.flac: this FLAC file does not state its length .*-f wav"):
        read_audio(path)
