"""The ``asrdecode`` command line, run in-process on the bundled models and clips (fast settings)."""

from __future__ import annotations

import gzip
import io
import json
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sentencepiece")

from asrdecode import cli  # noqa: E402
from asrdecode.audio import read_audio, resample  # noqa: E402
from asrdecode.evaluate import wer  # noqa: E402
from asrdecode.models.demo import ASSETS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "data" / "real"
CLIP = REAL / "cards-001.wav"
CLIP2 = REAL / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"
needs_rnnt = pytest.mark.skipif(not (ASSETS / "demo-rnnt.pt").is_file(), reason="demo-rnnt not bundled")
needs_tdt = pytest.mark.skipif(not (ASSETS / "demo-tdt.pt").is_file(), reason="demo-tdt not bundled")


def run(capsys: pytest.CaptureFixture, *argv: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad(capsys: pytest.CaptureFixture, *argv: object) -> str:
    """Run a command that must fail: exit 2, nothing on stdout, one line on stderr (returned)."""
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asrdecode: error: "), err
    return lines[0]


def write_wav(path: Path, audio: torch.Tensor, sr: int) -> Path:
    pcm = (audio.clamp(-1, 1) * 32767).round().to(torch.int16).numpy()
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sr)
        f.writeframes(pcm.tobytes())
    return path


# ------------------------------------------------------------------------------------------ transcribe
def test_transcribe_text(capsys) -> None:
    code, out, _ = run(capsys, "transcribe", CLIP, CLIP2, "--model", "demo-ctc")
    assert code == 0
    lines = out.splitlines()
    assert [ln.split("\t")[0] for ln in lines] == [str(CLIP), str(CLIP2)]
    assert all(ln.split("\t")[1].strip() for ln in lines)
    # the demo model is weak but not random: the LibriVox clip ("he was not an ill disposed young man")
    assert wer(["he was not an ill disposed young man"], [lines[1].split("\t")[1]]) < 0.9


def test_transcribe_json_timestamps(capsys) -> None:
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--format", "json")
    assert code == 0
    rec = json.loads(out)
    assert rec["audio"] == str(CLIP2) and rec["text"]
    toks = rec["tokens"]
    assert toks and all(t["start"] == pytest.approx(t["frame"] * 0.08, abs=1e-3) for t in toks)
    assert [t["frame"] for t in toks] == sorted(t["frame"] for t in toks)
    assert toks[0]["piece"].startswith("\u2581")
    words = rec["words"]
    assert " ".join(w["word"] for w in words) == rec["text"]
    assert sum(t["piece"].startswith("\u2581") for t in toks) == len(words)
    assert all(w["start"] < w["end"] for w in words)
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(words, words[1:]))


def test_transcribe_ctm_and_output_file(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "transcribe", CLIP, CLIP2, "--model", "demo-ctc", "--format", "ctm")
    assert code == 0
    rows = [ln.split() for ln in out.splitlines()]
    assert rows and all(len(r) == 5 for r in rows)
    assert {r[0] for r in rows} == {CLIP.stem, CLIP2.stem}
    assert all(r[1] == "1" and float(r[2]) >= 0 and float(r[3]) > 0 for r in rows)
    dest = tmp_path / "out.ctm"
    code, out2, _ = run(capsys, "transcribe", CLIP, CLIP2, "--model", "demo-ctc", "--format", "ctm", "-o", dest)
    assert code == 0 and out2 == "" and dest.read_text() == out
    assert [p.name for p in tmp_path.iterdir()] == ["out.ctm"]  # no temporary file left behind


@needs_rnnt
def test_transcribe_rnnt_wind_matches_plain_greedy(capsys) -> None:
    _, plain, _ = run(capsys, "transcribe", CLIP, CLIP2, "--model", "demo-rnnt", "--format", "json")
    code, wind, _ = run(capsys, "transcribe", CLIP, CLIP2, "--model", "demo-rnnt", "--window", "8", "--format", "json")
    assert code == 0
    assert [r["tokens"] for r in json.loads(wind)] == [r["tokens"] for r in json.loads(plain)]


@needs_tdt
def test_transcribe_tdt_durations(capsys) -> None:
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-tdt", "--format", "json")
    assert code == 0
    toks = json.loads(out)["tokens"]
    assert toks and all("duration" in t for t in toks)


def test_transcribe_beam_lm_and_boost(capsys) -> None:
    lm = ASSETS / "token-4gram.arpa.gz"
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam", "--beam", "4",
                       "--lm", lm, "--lm-weight", "0.7", "--beta", "2", "--boost", "ill disposed:3")
    assert code == 0 and out.split("\t")[1].strip()


def test_transcribe_resamples_other_rates(capsys, tmp_path: Path) -> None:
    audio = read_audio(CLIP2)
    path = write_wav(tmp_path / "clip8k.wav", resample(audio, 16000, 8000), 8000)
    code, out, _ = run(capsys, "transcribe", path, "--model", "demo-ctc")
    assert code == 0
    assert wer(["he was not an ill disposed young man"], [out.split("\t")[1]]) < 1.0


# --------------------------------------------------------------------------------------------- decode
def _clip_log_probs() -> torch.Tensor:
    from asrdecode.models import load

    demo = load("demo-ctc")
    lp, _ = demo.model.log_probs([read_audio(CLIP2)])
    return lp


def test_decode_emissions_matches_transcribe(capsys, tmp_path: Path) -> None:
    lp = _clip_log_probs()
    torch.save(lp, tmp_path / "lp.pt")
    np.save(tmp_path / "lp.npy", lp[0].numpy())  # [T, V]
    _, ref, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc")
    for name in ("lp.pt", "lp.npy"):
        code, out, _ = run(capsys, "decode", tmp_path / name, "--blank-id", "256", "--model", "demo-ctc")
        assert code == 0
        assert out.split("\t")[1] == ref.split("\t")[1]
    code, out, _ = run(capsys, "decode", tmp_path / "lp.pt", "--blank-id", "256", "--decoder", "beam", "--beam", "4",
                       "--format", "json")
    assert code == 0
    recs = json.loads(out)
    assert len(recs) == 1 and len(recs[0]["tokens"]) == len(recs[0]["timestamps"]) > 0
    assert "text" not in recs[0] and all(0 <= t < 256 for t in recs[0]["tokens"])


def test_decode_bad_inputs(capsys, tmp_path: Path) -> None:
    assert "no such emissions file" in bad(capsys, "decode", tmp_path / "none.pt", "--blank-id", "0")
    torch.save({"x": torch.zeros(2, 3)}, tmp_path / "dict.pt")
    assert "expected a tensor" in bad(capsys, "decode", tmp_path / "dict.pt", "--blank-id", "0")
    torch.save(torch.zeros(2, 3, 4, 5), tmp_path / "rank4.pt")
    assert "[B, T, V]" in bad(capsys, "decode", tmp_path / "rank4.pt", "--blank-id", "0")
    (tmp_path / "x.txt").write_text("1 2 3")
    assert ".pt or .npy" in bad(capsys, "decode", tmp_path / "x.txt", "--blank-id", "0")
    (tmp_path / "garbage.npy").write_bytes(b"not numpy")
    assert "garbage.npy" in bad(capsys, "decode", tmp_path / "garbage.npy", "--blank-id", "0")
    torch.save(torch.randn(5, 7).log_softmax(-1), tmp_path / "small.pt")
    assert "blank_id" in bad(capsys, "decode", tmp_path / "small.pt", "--blank-id", "9")
    assert "vocabulary" in bad(capsys, "decode", tmp_path / "small.pt", "--blank-id", "0", "--model", "demo-ctc")
    torch.save(torch.full((5, 7), float("nan")), tmp_path / "nan.pt")
    assert "NaN" in bad(capsys, "decode", tmp_path / "nan.pt", "--blank-id", "0")


# ----------------------------------------------------------------------------------------------- eval
def _manifest(tmp_path: Path, rows: list[dict]) -> Path:
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return m


class TTY(io.StringIO):
    """A stderr that says it is a terminal (progress bars are drawn only on one)."""

    def isatty(self) -> bool:
        return True


def test_eval_prints_metrics_and_predictions(capsys, tmp_path: Path, monkeypatch) -> None:
    m = _manifest(tmp_path, [
        {"audio_filepath": str(CLIP), "duration": 1.7, "text": "tend of cards"},
        {"audio_filepath": str(CLIP2), "duration": 2.99, "text": "he was not an ill disposed young man"},
    ])
    pred = tmp_path / "pred.jsonl"
    tty = TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    code, out, _ = run(capsys, "eval", m, "--model", "demo-ctc", "--batch-size", "1", "-o", pred)
    assert code == 0
    header, *rows = out.splitlines()
    assert header == "model demo-ctc, decoder greedy (defaults)"
    vals = {ln[:18].strip(): ln[18:].split()[0] for ln in rows}
    assert int(vals["utterances"]) == 2
    seconds = (read_audio(CLIP).numel() + read_audio(CLIP2).numel()) / 16000
    assert float(vals["audio seconds"]) == pytest.approx(seconds, abs=0.06)
    recs = [json.loads(x) for x in pred.read_text().splitlines()]
    expect = wer([r["text"] for r in recs], [r["pred_text"] for r in recs])
    assert float(vals["WER"]) == pytest.approx(100 * expect, abs=0.01)
    assert 0 <= float(vals["CER"]) <= 100
    assert 0 < float(vals["RTFx total"]) < float(vals["RTFx decoder-only"])
    assert "2/2" in tty.getvalue()  # the progress bar, on a terminal
    run_info = json.loads((tmp_path / "pred.run.json").read_text())  # the sidecar: model, decoder, options
    assert run_info["model"] == "demo-ctc" and run_info["decoder"] == "greedy" and run_info["options"] == {}
    assert 100 * run_info["wer"] == pytest.approx(float(vals["WER"]), abs=0.01)
    assert run_info["utterances"] == 2 and run_info["predictions"] == str(pred)


def test_eval_header_names_resolved_options_and_quiet_hides_the_bar(capsys, tmp_path: Path, monkeypatch) -> None:
    lm = ASSETS / "token-4gram.arpa.gz"
    m = _manifest(tmp_path, [{"audio_filepath": str(CLIP), "duration": 1.7, "text": "tend of cards"}])
    tty = TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    code, out, _ = run(capsys, "eval", m, "--model", "demo-ctc", "--decoder", "beam", "--beam", "3", "--lm", lm,
                       "--quiet", "-o", tmp_path / "p")
    assert code == 0 and tty.getvalue() == ""
    header = out.splitlines()[0]
    assert header.startswith("model demo-ctc, decoder beam (beam=3, ") and f"lm={lm}" in header
    info = json.loads((tmp_path / "p.run.json").read_text())
    assert info["decoder"] == "beam" and info["options"]["beam"] == 3 and info["options"]["lm"] == str(lm)
    from asrdecode.models import load

    tuned_beta = load("demo-ctc").decode_defaults["beta"]  # not given: the model's tuned value, resolved
    assert info["options"]["beta"] == pytest.approx(tuned_beta) and f"beta={tuned_beta:g}" in header
    assert cli.eval_sidecar(Path("a/pred.jsonl")) == Path("a/pred.run.json")


def test_eval_bad_manifests(capsys, tmp_path: Path) -> None:
    assert "no such manifest" in bad(capsys, "eval", tmp_path / "none.jsonl", "--no-progress")
    m = _manifest(tmp_path, [{"audio_filepath": str(CLIP), "duration": 1.7, "text": "x"},
                             {"audio_filepath": str(CLIP), "text": "x"}])
    assert f"{m}:2: missing field(s) duration" in bad(capsys, "eval", m, "--no-progress")
    m.write_text(json.dumps({"audio_filepath": str(CLIP), "duration": 1.7, "text": "x"}) + "\n{oops\n")
    assert f"{m}:2: not valid JSON" in bad(capsys, "eval", m, "--no-progress")
    (tmp_path / "fake.wav").write_text("this is not audio")
    m = _manifest(tmp_path, [{"audio_filepath": "fake.wav", "duration": 1.0, "text": "x"}])
    msg = bad(capsys, "eval", m, "--no-progress", "-o", tmp_path / "pred.jsonl")
    assert f"{m}:1:" in msg and "fake.wav" in msg
    assert not (tmp_path / "pred.jsonl").exists()


# -------------------------------------------------------------------------------- transcribe bad input
def test_transcribe_bad_inputs(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert "none.wav: no such audio file" in bad(capsys, "transcribe", CLIP, tmp_path / "none.wav", "-o", out)
    (tmp_path / "fake.wav").write_text("this is not audio")
    assert "fake.wav" in bad(capsys, "transcribe", tmp_path / "fake.wav", "--model", "demo-ctc", "-o", out)
    assert not out.exists()
    assert "--decoder beam" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "--lm",
                                   ASSETS / "token-4gram.arpa.gz")
    assert "no such LM file" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam",
                                    "--lm", tmp_path / "none.arpa")
    assert "--window" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "--window", "8")
    assert "weight" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam",
                           "--boost", "phrase:heavy")
    assert "folder" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "-o", tmp_path / "no" / "x.txt")
    # a word-level LM names words that are not model tokens
    word_lm = ASSETS / "word-3gram.arpa.gz"
    if word_lm.is_file():
        assert "names no model token" in bad(capsys, "transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam",
                                             "--lm", word_lm)


def test_usage_errors_and_help(capsys) -> None:
    # --model takes any bundle spec: an unknown one is a one-line error naming what is accepted
    assert "expected a bundled model name (demo-ctc" in bad(capsys, "transcribe", CLIP.as_posix(), "--model", "nope")
    for sub in ("transcribe", "decode", "eval", "build-lm"):
        with pytest.raises(SystemExit) as info:
            cli.main([sub, "--help"])
        assert info.value.code == 0
        assert "examples:" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- build-lm
def test_build_lm_without_lmplz(capsys, tmp_path: Path, monkeypatch) -> None:
    import asrdecode.lm.arpa as arpa

    def missing(name: str = "lmplz") -> Path:
        raise FileNotFoundError(f"KenLM's {name} was not found; build it with recipes/build_kenlm.sh")

    monkeypatch.setattr(arpa, "find_kenlm_tool", missing)
    (tmp_path / "c.txt").write_text("a b c\n")
    msg = bad(capsys, "build-lm", tmp_path / "c.txt", "--order", "2", "--out", tmp_path / "lm.arpa")
    assert "build_kenlm.sh" in msg
    assert list(tmp_path.iterdir()) == [tmp_path / "c.txt"]
    assert "no such text file" in bad(capsys, "build-lm", tmp_path / "none.txt", "--order", "2", "--out",
                                      tmp_path / "lm.arpa")


def test_build_lm_word_and_token(capsys, tmp_path: Path) -> None:
    from asrdecode.lm import NGramLM, find_kenlm_tool, read_arpa

    try:
        find_kenlm_tool("lmplz")
    except FileNotFoundError:
        pytest.skip("lmplz not built (recipes/build_kenlm.sh)")
    text = tmp_path / "c.txt"
    text.write_text("he was not an ill disposed young man\nthe cat sat on the mat\nhe sat on the mat\n")
    code, out, _ = run(capsys, "build-lm", text, "--order", "3", "--out", tmp_path / "w.arpa")
    assert code == 0 and "word-level 3-gram" in out
    words = read_arpa(tmp_path / "w.arpa")
    assert words.order == 3
    code, _, _ = run(capsys, "build-lm", text, "--order", "3", "--tokens", "--model", "demo-ctc",
                     "--out", tmp_path / "t.arpa.gz")
    assert code == 0
    assert b"\\data\\" in gzip.decompress((tmp_path / "t.arpa.gz").read_bytes())[:20]
    lm = NGramLM.from_arpa(tmp_path / "t.arpa.gz", vocab_size=257, blank_id=256)
    assert lm.order == 3
    # the token LM plugs into transcribe
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam", "--beam", "4",
                       "--lm", tmp_path / "t.arpa.gz")
    assert code == 0 and out.strip()


def test_transcribe_empty_audio(capsys, tmp_path: Path) -> None:
    empty = write_wav(tmp_path / "empty.wav", torch.zeros(0), 16000)
    code, out, err = run(capsys, "transcribe", empty, CLIP, "--model", "demo-ctc", "--format", "json")
    assert code == 0
    assert err.splitlines() == [f"asrdecode: warning: {empty} holds no audio samples; its transcript is empty"]
    recs = json.loads(out)
    assert recs[0]["text"] == "" and recs[0]["tokens"] == [] and recs[0]["words"] == []
    assert recs[1]["text"]


def test_demo_table_format() -> None:
    from asrdecode.demo import DemoRow, format_table

    rows = [DemoRow("demo-ctc", "greedy", {"synthetic": 0.5, "real": 0.25}, 1.0, 300.0, 1.0),
            DemoRow("demo-ctc", "beam 8", {"synthetic": 0.4, "real": 0.2}, 4.0, 300.0, 0.25),
            DemoRow("demo-ctc", "broken", note="failed: x")]
    lines = format_table(rows).splitlines()
    assert lines[0].split()[:2] == ["model", "decoder"]
    assert lines[2].split() == ["demo-ctc", "greedy", "50.0", "25.0", "300", "1.00"]
    assert lines[3].split() == ["demo-ctc", "beam", "8", "40.0", "20.0", "75", "0.25"]
    assert lines[4].endswith("failed: x")


@needs_rnnt
def test_transcribe_rnnt_beam(capsys) -> None:
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-rnnt", "--decoder", "beam", "--beam", "2",
                       "--boost", "ill disposed:1", "--format", "json")
    assert code == 0
    rec = json.loads(out)
    assert rec["text"] and len(rec["tokens"]) > 0


@needs_rnnt
@pytest.mark.parametrize("method,window,gamma", [("aes", None, None), ("wind", 3, None), ("wind", 8, 0.5),
                                                 ("wind", None, None)])
def test_transcribe_beam_method_equals_the_library_call(capsys, method, window, gamma) -> None:
    from asrdecode.models import load
    from asrdecode.transducer import beam_search

    code, out, _ = run(capsys, "transcribe", CLIP, "--model", "demo-rnnt", "--decoder", "beam", "--beam", "2",
                       "--method", method, "--format", "json", *(["--window", window] if window else []),
                       *(["--expansion-gamma", gamma] if gamma is not None else []))
    assert code == 0
    demo = load("demo-rnnt")
    with torch.inference_mode():
        enc, n = demo.encode([read_audio(CLIP)])
        # no --window with --method wind: the library's window (8), one default everywhere
        kw = {"window": window or 8, "expansion_gamma": gamma} if method == "wind" else {}
        hyp = beam_search(demo.model, enc, n, beam=2, method=method, tokenizer=demo.tokenizer, **kw)[0][0]
    assert json.loads(out)["text"] == hyp.text


@pytest.mark.parametrize("argv,message", [
    (["--model", "demo-rnnt", "--decoder", "beam", "--window", "4"], "needs --method wind"),
    (["--model", "demo-ctc", "--decoder", "beam", "--method", "wind"], "--method does not apply"),
    (["--model", "demo-rnnt", "--decoder", "beam", "--method", "aes", "--window", "1"], "needs --method wind"),
    (["--model", "demo-rnnt", "--beam", "4"], "--beam does not apply to --decoder greedy"),
    (["--model", "demo-ctc", "--decoder", "beam", "--beta", "1"], "--beta needs --lm or --word-lm"),
    (["--model", "demo-ctc", "--decoder", "beam", "--word-bonus", "1"], "--word-bonus needs --word-lm"),
    (["--model", "demo-ctc", "--nbest", "2"], "--nbest does not apply to --decoder greedy"),
    (["--model", "demo-ctc", "--decoder", "beam", "--nbest", "2"], "--nbest 2 needs --format json"),
    (["--model", "demo-rnnt", "--max-symbols", "0"], "--max-symbols must be an int >= 1"),
    (["--model", "demo-rnnt", "--decoder", "beam", "--expansion-gamma", "1"], "--method wind"),
    (["--model", "demo-rnnt", "--expansion-gamma", "1"], "does not apply to --decoder greedy"),
    (["--model", "demo-rnnt", "--decoder", "beam", "--method", "wind", "--expansion-gamma", "-1"], "finite number >= 0"),
])
def test_beam_method_and_window_misuse(capsys, argv, message) -> None:
    code, _, err = run(capsys, "transcribe", CLIP, *argv)
    assert code == 2 and message in err


def test_long_audio_shows_a_bar_in_audio_seconds_on_a_terminal(capsys, monkeypatch) -> None:
    seconds = read_audio(CLIP2).numel() / 16000
    tty = TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--long-audio-seconds", "2")
    assert code == 0 and out.strip()
    assert "decoding audio" in tty.getvalue() and f"{seconds:.1f}/{seconds:.1f} s" in tty.getvalue()
    quiet = TTY()
    monkeypatch.setattr(sys, "stderr", quiet)
    code, out2, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--long-audio-seconds", "2", "--quiet")
    assert code == 0 and out2 == out and quiet.getvalue() == ""


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def test_transcribe_reads_standard_input(capsys, monkeypatch, tmp_path: Path) -> None:
    """`... | asrdecode transcribe -`: the same transcript as the file; a WAV as a pipe writer leaves it (sizes
    0xFFFFFFFF) too; empty or unreadable input and a second '-' are named errors."""
    code, want, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc")
    monkeypatch.setattr(sys, "stdin", _Stdin(CLIP2.read_bytes()))
    code, out, _ = run(capsys, "transcribe", "-", "--model", "demo-ctc")
    assert code == 0 and out == want.replace(str(CLIP2), "-")
    raw = CLIP2.read_bytes()
    at = raw.index(b"data")
    piped = b"RIFF\xff\xff\xff\xff" + raw[8:at + 4] + b"\xff\xff\xff\xff" + raw[at + 8:]
    monkeypatch.setattr(sys, "stdin", _Stdin(piped))
    code, out, _ = run(capsys, "transcribe", "-", "--model", "demo-ctc", "--format", "srt", "-o", tmp_path)
    assert code == 0 and (tmp_path / "stdin.srt").read_text(encoding="utf-8").startswith("1\n00:00:")
    monkeypatch.setattr(sys, "stdin", _Stdin(b""))
    assert "standard input holds no audio" in bad(capsys, "transcribe", "-", "--model", "demo-ctc")
    monkeypatch.setattr(sys, "stdin", _Stdin(b"hello\n"))
    line = bad(capsys, "transcribe", "-", "--model", "demo-ctc")
    assert line.startswith("asrdecode: error: -: cannot read audio") and "asrdecode-stdin" not in line
    assert "can be given once" in bad(capsys, "transcribe", "-", "-", "--model", "demo-ctc")
