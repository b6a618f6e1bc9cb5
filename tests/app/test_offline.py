"""``asrdecode.transcribe`` / ``asrdecode.Recognizer``: the Python twin of ``asrdecode transcribe`` gives the
CLI's transcripts (default model, tuned options, long files in windows), takes paths and waveforms at any
rate, returns one result per input (n-best lists with ``nbest``), and names every bad input."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

import asrdecode
from asrdecode import cli
from asrdecode.audio import read_audio, resample
from asrdecode.errors import DecodingInputError

REAL = Path(__file__).resolve().parents[2] / "data" / "real"
CLIP, CLIP2 = REAL / "cards-001.wav", REAL / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"


def cli_records(capsys, *argv: str) -> list[dict]:
    assert cli.main(["transcribe", *argv, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return out if isinstance(out, list) else [out]


def test_default_model_equals_the_cli(capsys) -> None:
    """No model named: phone-ctc with its graph and tuned options, as `asrdecode transcribe clip.wav`."""
    want = cli_records(capsys, str(CLIP))[0]
    got = asrdecode.transcribe(CLIP)
    assert got.text == want["text"] and got.text
    assert [w for w, _, _ in got.words] == [w["word"] for w in want["words"]]


@pytest.mark.parametrize("model, options, flags", [
    ("demo-ctc", {"decoder": "beam", "beam": 4, "lm": "src/asrdecode/models/assets/token-4gram.arpa.gz"},
     ["--decoder", "beam", "--beam", "4", "--lm", "src/asrdecode/models/assets/token-4gram.arpa.gz"]),
    ("demo-rnnt", {"window": 4}, ["--window", "4"]),
])
def test_options_and_long_files_equal_the_cli(capsys, monkeypatch, model, options, flags) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    for long in ("60", "2"):  # whole files, and CLIP2 decoded in windows
        want = cli_records(capsys, str(CLIP), str(CLIP2), "--model", model, *flags, "--long-audio-seconds", long)
        rec = asrdecode.Recognizer(model, long_audio_seconds=float(long), **options)
        got = rec([CLIP, str(CLIP2)])
        assert [h.text for h in got] == [r["text"] for r in want]
        assert [h.tokens for h in got] == [[t["id"] for t in r["tokens"]] for r in want]
        assert [h.text for h in rec([CLIP, CLIP2])] == [r["text"] for r in want]  # the pipeline is reused


def test_waveforms_at_any_rate_and_nbest(tmp_path: Path) -> None:
    rec = asrdecode.Recognizer("demo-ctc", decoder="beam", beam=4, nbest=3)
    wave16 = read_audio(CLIP2)
    from_file = rec(CLIP2)
    assert isinstance(from_file, list) and 1 <= len(from_file) <= 3  # one input, its n-best list
    assert [h.text for h in rec(wave16)] == [h.text for h in from_file]
    assert [h.text for h in rec(wave16.numpy())] == [h.text for h in from_file]
    wave8 = resample(wave16, 16000, 8000)
    path8 = tmp_path / "clip8k.wav"
    with wave.open(str(path8), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(8000)
        f.writeframes((wave8.clamp(-1, 1) * 32767).round().to(torch.int16).numpy().tobytes())
    pcm8 = read_audio(path8, sample_rate=8000)
    assert [h.text for h in rec(pcm8, sample_rate=8000)] == [h.text for h in rec(path8)]  # resampled alike
    flipped = wave16.numpy()[::-1]  # negative strides and the other byte order are NumPy waveforms too
    assert [h.text for h in rec(flipped)] == [h.text for h in rec(flipped.copy())]
    assert [h.text for h in rec(wave16.numpy().astype(">f4"))] == [h.text for h in from_file]
    both = rec([CLIP2, wave16])
    assert len(both) == 2 and [h.text for h in both[0]] == [h.text for h in both[1]]
    assert asrdecode.Recognizer("demo-ctc")([]) == []


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    rec = asrdecode.Recognizer("demo-ctc")
    with pytest.raises(DecodingInputError, match=r"1-D \[N\], got shape \(2, 16000\); give several"):
        rec(torch.zeros(2, 16000))
    with pytest.raises(DecodingInputError, match=r"audio\[1\]: a waveform holds float samples"):
        rec([torch.zeros(100), np.zeros(100, np.int16)])
    with pytest.raises(DecodingInputError, match=r"audio\[0\] contains NaN"):
        rec([torch.tensor([0.0, float("nan")] * 800)])
    with pytest.raises(DecodingInputError, match=r"audio\[0\]: expected a path or a 1-D waveform, got int"):
        rec([3])
    with pytest.raises(DecodingInputError, match="audio: expected a path, a 1-D waveform or a list of them, got int"):
        rec(5)
    with pytest.raises(DecodingInputError, match="sample_rate must be a positive int"):
        rec(torch.zeros(100), sample_rate=0)
    with pytest.raises(asrdecode.FileFormatError, match="missing.wav"):
        rec(tmp_path / "missing.wav")
    with pytest.raises(DecodingInputError, match="unknown option 'beams'"):
        asrdecode.Recognizer("demo-ctc", beams=4)
    with pytest.raises(DecodingInputError, match="--beam does not apply to --decoder greedy"):
        asrdecode.Recognizer("demo-ctc", beam=4)
    with pytest.raises(DecodingInputError, match="long_audio_seconds"):
        asrdecode.Recognizer("demo-ctc", long_audio_seconds=0.0)
    with pytest.raises(DecodingInputError, match="not-a-model"):
        asrdecode.Recognizer("not-a-model")


def test_a_loaded_bundle_and_boost_phrases() -> None:
    from asrdecode.models import load

    bundle = load("demo-ctc")
    plain = asrdecode.Recognizer(bundle, decoder="beam", beam=4)
    assert plain.bundle is bundle
    boosted = asrdecode.Recognizer(bundle, decoder="beam", beam=4, boost=["edward:30"])
    single = asrdecode.Recognizer(bundle, decoder="beam", beam=4, boost="edward:30")
    assert boosted.options.boost == single.options.boost == ("edward:30",)
    assert "edward" not in plain(CLIP2).text.split()
    assert "edward" in boosted(CLIP2).text.split() and single(CLIP2).text == boosted(CLIP2).text
