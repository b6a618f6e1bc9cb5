"""WER/CER, text normalisation, manifest reading and the RTFx harness of asrdecode.evaluate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jiwer
import pytest
import torch

from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.evaluate import (
    Timing,
    cer,
    char_errors,
    normalize_text,
    read_manifest,
    run_evaluation,
    timed,
    wer,
    word_errors,
)
from asrdecode.results import Hypothesis


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("Hello, World!", "hello world"),
        ("  don't   STOP  ", "don't stop"),
        ("cold-hearted; ill-disposed.", "cold hearted ill disposed"),
        ("It\u2019s 42 o'clock", "it's 42 o'clock"),
        ("snake_case\tand\nnewlines", "snake case and newlines"),
        ("Ça va?", "ça va"),
        ("...", ""),
    ],
)
def test_normalize_text(raw: str, norm: str) -> None:
    assert normalize_text(raw) == norm


def test_normalize_rejects_non_str() -> None:
    with pytest.raises(DecodingInputError):
        normalize_text(None)  # type: ignore[arg-type]


def test_wer_known_values() -> None:
    # one substitution (b->x) and one insertion (d): 2 errors / 3 words
    assert wer(["a b c"], ["a x c d"]) == pytest.approx(2 / 3)
    c = word_errors(["a b c", "e f"], ["a x c d", "e"])
    assert (c.substitutions, c.deletions, c.insertions, c.reference_length) == (1, 1, 1, 5)
    assert c.rate == pytest.approx(3 / 5)
    # corpus WER is total errors / total words, not the mean of utterance WERs
    assert wer(["a", "b c d e"], ["x", "b c d e"]) == pytest.approx(1 / 5)


def test_wer_normalises_and_matches_jiwer() -> None:
    refs = ["The cat, sat on the mat.", "I can't see it!"]
    hyps = ["the cat sat in the mat", "i cant see"]
    assert wer(refs, hyps) == pytest.approx(jiwer.wer([normalize_text(r) for r in refs],
                                                      [normalize_text(h) for h in hyps]))
    assert wer(refs, hyps) == pytest.approx(3 / 10)
    assert wer(refs, hyps, normalize=False) > wer(refs, hyps)


def test_cer() -> None:
    assert cer(["abcd"], ["abxd"]) == pytest.approx(1 / 4)
    assert cer(["Ab, cd"], ["ab cd"]) == 0.0
    c = char_errors(["ab"], [""])
    assert (c.deletions, c.reference_length) == (2, 2)


def test_empty_references() -> None:
    # an empty reference contributes its hypothesis words as insertions and no reference words
    assert wer(["", "a b"], ["x y", "a b"]) == pytest.approx(2 / 2)
    assert wer([""], [""]) == 0.0
    assert math.isinf(wer([""], ["x"]))
    assert wer([], []) == 0.0


def test_wer_bad_arguments() -> None:
    with pytest.raises(DecodingInputError, match="entries"):
        wer(["a"], ["a", "b"])
    with pytest.raises(DecodingInputError, match="not single strings"):
        wer("a b", "a b")  # type: ignore[arg-type]
    with pytest.raises(DecodingInputError):
        wer(["a"], [None])  # type: ignore[list-item]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_manifest_paths_and_extra(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.wav").write_bytes(b"x")
    absolute = tmp_path / "b.wav"
    absolute.write_bytes(b"x")
    m = _write(tmp_path / "sub" / "m.jsonl", [
        json.dumps({"audio_filepath": "a.wav", "duration": 1.5, "text": "hi there", "voice": "v1"}),
        "",
        json.dumps({"audio_filepath": str(absolute), "duration": 2, "text": ""}),
    ])
    e = read_manifest(m)
    assert [x.audio_filepath for x in e] == [tmp_path / "sub" / "a.wav", absolute]
    assert [x.duration for x in e] == [1.5, 2.0]
    assert [x.text for x in e] == ["hi there", ""]
    assert [x.line for x in e] == [1, 3]
    assert e[0].extra == {"voice": "v1"} and e[1].extra == {}


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"audio_filepath": "a.wav", "duration": 1', "not valid JSON"),
        ('["a.wav", 1, "x"]', "JSON object"),
        ('{"audio_filepath": "a.wav", "text": "x"}', "missing field"),
        ('{"duration": 1, "text": "x"}', "audio_filepath"),
        ('{"audio_filepath": "a.wav", "duration": -1, "text": "x"}', "duration"),
        ('{"audio_filepath": "a.wav", "duration": "1", "text": "x"}', "duration"),
        ('{"audio_filepath": "a.wav", "duration": 1, "text": 5}', "text must be"),
        ('{"audio_filepath": "", "duration": 1, "text": "x"}', "audio_filepath"),
        ('{"audio_filepath": "missing.wav", "duration": 1, "text": "x"}', "does not exist"),
    ],
)
def test_read_manifest_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "a.wav").write_bytes(b"x")
    good = json.dumps({"audio_filepath": "a.wav", "duration": 1, "text": "ok"})
    m = _write(tmp_path / "m.jsonl", [good, line])
    with pytest.raises(FileFormatError, match=message) as info:
        read_manifest(m)
    assert info.value.line == 2
    assert str(info.value).startswith(f"{m}:2:")


def test_read_manifest_missing_audio_allowed_without_check(tmp_path: Path) -> None:
    m = _write(tmp_path / "m.jsonl", [json.dumps({"audio_filepath": "nope.wav", "duration": 1, "text": "x"})])
    assert read_manifest(m, check_audio=False)[0].audio_filepath == tmp_path / "nope.wav"


def test_read_manifest_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="no such manifest"):
        read_manifest(tmp_path / "none.jsonl")
    with pytest.raises(FileFormatError, match="no entries"):
        read_manifest(_write(tmp_path / "empty.jsonl", ["", "  "]))


def test_timing_rtfx() -> None:
    t = Timing(audio_seconds=100.0, frontend_seconds=3.0, decoder_seconds=1.0)
    assert t.total_seconds == 4.0
    assert t.rtfx_total == pytest.approx(25.0)
    assert t.rtfx_decoder == pytest.approx(100.0)
    t += Timing(20.0, 1.0, 1.0)
    assert (t.audio_seconds, t.rtfx_decoder) == (120.0, pytest.approx(60.0))
    assert math.isinf(Timing(1.0).rtfx_decoder)


def test_timed_returns_result_and_fastest() -> None:
    calls = []

    def fn() -> int:
        calls.append(1)
        return len(calls)

    out, secs = timed(fn, repeats=3)
    assert out == 3 and len(calls) == 3 and 0 <= secs < 1.0
    with pytest.raises(DecodingInputError):
        timed(fn, repeats=0)


def test_run_evaluation_batches_scores_and_times(tmp_path: Path) -> None:
    texts = ["one two", "three", "four five six", "seven"]
    rows = []
    for i, t in enumerate(texts):
        (tmp_path / f"{i}.wav").write_bytes(b"x")
        rows.append(json.dumps({"audio_filepath": f"{i}.wav", "duration": 1, "text": t}))
    entries = read_manifest(_write(tmp_path / "m.jsonl", rows))
    # "audio" of i+1 seconds whose first sample encodes the utterance index
    read = lambda p: torch.full((16000 * (int(p.stem) + 1),), float(p.stem))  # noqa: E731
    hyp_text = {0: "one two", 1: "tree", 2: "four five six", 3: "seven eight"}
    encode = lambda waves: (torch.stack([w[:1] for w in waves]), torch.ones(len(waves), dtype=torch.long))  # noqa: E731
    decode = lambda x, n: [Hypothesis([], [], 0.0, text=hyp_text[int(v)]) for v in x[:, 0]]  # noqa: E731
    seen = []
    res = run_evaluation(entries, encode, decode, read=read, batch_size=3, progress=seen.append)
    assert seen == [3, 1]
    assert [h.text for h in res.hypotheses] == [hyp_text[i] for i in range(4)]
    assert res.wer == pytest.approx(2 / 7)  # tree/three substitution, eight insertion
    assert res.timing.audio_seconds == pytest.approx(1 + 2 + 3 + 4)
    assert res.timing.frontend_seconds > 0 and res.timing.decoder_seconds > 0
    assert res.references == texts
    bad_decode = lambda x, n: []  # noqa: E731
    with pytest.raises(DecodingInputError, match="hypotheses"):
        run_evaluation(entries, encode, bad_decode, read=read)


def test_read_manifest_takes_a_folder_holding_manifest_jsonl(tmp_path):
    from asrdecode.evaluate import read_manifest

    real = read_manifest("data/real")  # the shipped folder: its manifest.jsonl
    assert real == read_manifest("data/real/manifest.jsonl")
    with pytest.raises(FileFormatError, match="folder without a manifest.jsonl"):
        read_manifest(tmp_path)
