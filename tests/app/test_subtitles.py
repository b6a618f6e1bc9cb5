"""SRT / WebVTT subtitles (``records.subtitle_cues``, ``transcribe --format srt|vtt``): the cue rules (line
length, two lines, 7 s, pauses), cues never overlapping, the clocks' formats, and the CLI's one-file-per-audio
outputs with their usage errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import cli
from asrdecode.errors import DecodingInputError
from asrdecode.records import (CUE_CHARS, CUE_LINES, CUE_MIN_SECONDS, CUE_PAUSE, CUE_SECONDS, format_records,
                               subtitle_cues)

REAL = Path(__file__).resolve().parents[2] / "data" / "real"
CLIP, CLIP2 = REAL / "cards-001.wav", REAL / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"


def record(words: list[tuple[str, float, float]], text: str | None = None) -> dict:
    return {"audio": "a.wav", "text": text if text is not None else " ".join(w for w, _, _ in words), "tokens": [],
            "words": [{"word": w, "start": s, "end": e} for w, s, e in words]}


def test_cues_break_at_pauses_lines_and_seconds() -> None:
    words = [("one", 0.0, 0.4), ("two", 0.5, 0.9), ("three", 0.95 + CUE_PAUSE, 2.5)]  # a pause of CUE_PAUSE
    assert subtitle_cues(record(words)) == [(0.0, 0.9, "one two"), (1.95, 2.5, "three")]
    long = [(f"word{k:02d}", 0.3 * k, 0.3 * k + 0.2) for k in range(20)]  # 6 chars each, no pauses
    cues = subtitle_cues(record(long))
    assert " ".join(t.replace("\n", " ") for _, _, t in cues) == " ".join(w for w, _, _ in long)
    for _, _, text in cues:
        lines = text.split("\n")
        assert len(lines) <= CUE_LINES and all(len(ln) <= CUE_CHARS for ln in lines)
    assert len(cues[0][2].split("\n")) == CUE_LINES  # filled before a new cue starts
    slow = [(f"w{k}", 0.9 * k, 0.9 * k + 0.5) for k in range(12)]  # 12 short words over 10.4 s
    assert all(e - s <= CUE_SECONDS for s, e, _ in subtitle_cues(record(slow)))


def test_short_cues_are_shown_a_minimum_time_without_running_into_the_next() -> None:
    cues = subtitle_cues(record([("a", 1.0, 1.1), ("b", 2.2, 2.3), ("c", 2.75, 2.8)]))
    assert cues == [(1.0, 1.0 + CUE_MIN_SECONDS, "a"), (2.2, 2.8, "b c")]  # b starts after a pause
    b, c = "b" * 50, "c" * 50  # a word longer than a line stands alone on its line: a, b fill the cue
    tight = subtitle_cues(record([("a", 1.0, 1.1), (b, 1.2, 1.25), (c, 1.3, 1.4)]))
    assert tight == [(1.0, 1.3, f"a\n{b}"), (1.3, 1.3 + CUE_MIN_SECONDS, c)]  # lengthened up to the next cue


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text("abcdefghij' ", min_size=0, max_size=30), st.floats(0, 3), st.floats(0, 2)),
                max_size=40))
def test_cues_keep_every_word_in_order_without_overlap(draw) -> None:
    t, words = 0.0, []
    for text, gap, length in draw:  # monotonic word times, as the decoders give them
        words.append((text, t + gap, t + gap + length))
        t += gap + length
    cues = subtitle_cues(record(words))
    kept = [w.strip() for w, _, _ in words if w.strip()]
    assert " ".join(t.replace("\n", " ") for _, _, t in cues).split() == " ".join(kept).split()
    for s, e, _ in cues:
        assert s <= e
    for (_, e0, _), (s1, _, _) in zip(cues, cues[1:]):
        assert e0 <= s1


def test_formats_and_clocks() -> None:
    rec = record([("hello", 3725.0004, 3725.5), ("world", 3725.6, 3726.25)])
    assert format_records([rec], "srt") == "1\n01:02:05,000 --> 01:02:06,250\nhello world\n"
    assert format_records([rec], "vtt") == "WEBVTT\n\n01:02:05.000 --> 01:02:06.250\nhello world\n"
    two = record([("a", 0.0, 0.5), ("b", 5.0, 5.5)])
    assert format_records([two], "srt") == ("1\n00:00:00,000 --> 00:00:00,500\na\n\n"
                                            "2\n00:00:05,000 --> 00:00:05,500\nb\n")
    assert format_records([record([])], "srt") == "" and format_records([record([])], "vtt") == "WEBVTT\n"
    no_words = {"audio": "a.wav", "text": "a b", "tokens": [{"id": 1, "start": 0.4}, {"id": 2, "start": 0.9}]}
    assert subtitle_cues(no_words) == [(0.4, 0.9, "a b")]  # no word times: one cue over the tokens' times
    with pytest.raises(DecodingInputError, match="one audio file's subtitles, got 2"):
        format_records([rec, rec], "srt")


def test_transcribe_writes_subtitles(capsys, tmp_path: Path) -> None:
    assert cli.main(["transcribe", str(CLIP2), "--model", "demo-ctc", "--format", "json"]) == 0
    import json

    words = json.loads(capsys.readouterr().out)["words"]
    assert cli.main(["transcribe", str(CLIP2), "--model", "demo-ctc", "--format", "srt"]) == 0
    srt = capsys.readouterr().out
    blocks = srt.strip().split("\n\n")
    assert [b.split("\n")[0] for b in blocks] == [str(k) for k in range(1, len(blocks) + 1)]
    clock = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
    first = re.match(rf"{clock} --> {clock}", blocks[0].split("\n")[1])
    assert first is not None
    assert int(first[4]) / 1000 + int(first[3]) == pytest.approx(words[0]["start"], abs=1e-3)
    assert " ".join(" ".join(b.split("\n")[2:]) for b in blocks) == " ".join(w["word"] for w in words)
    out = tmp_path / "subs"  # several files: a folder (created), one file per audio
    assert cli.main(["transcribe", str(CLIP), str(CLIP2), "--model", "demo-ctc", "--format", "vtt", "-o",
                     str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{CLIP.stem}.vtt", f"{CLIP2.stem}.vtt"])
    assert all(p.read_text(encoding="utf-8").startswith("WEBVTT\n") for p in out.iterdir())
    assert cli.main(["transcribe", str(CLIP2), "--model", "demo-ctc", "--format", "srt", "-o", str(out)]) == 0
    assert (out / f"{CLIP2.stem}.srt").read_text(encoding="utf-8") == srt  # one file into an existing folder
    assert cli.main(["transcribe", str(CLIP2), "--model", "demo-ctc", "--format", "srt", "-o",
                     str(tmp_path / "one.srt")]) == 0
    assert (tmp_path / "one.srt").read_text(encoding="utf-8") == srt
    slash = tmp_path / "new"  # a path ending in / names a folder (argparse's Path would drop the slash)
    assert cli.main(["transcribe", str(CLIP2), "--model", "demo-ctc", "--format", "srt", "-o", f"{slash}/"]) == 0
    assert (slash / f"{CLIP2.stem}.srt").read_text(encoding="utf-8") == srt
    talks = tmp_path / "talks"  # an input folder (here of one file): -o is a folder
    talks.mkdir()
    (talks / CLIP2.name).write_bytes(CLIP2.read_bytes())
    assert cli.main(["transcribe", str(talks), "--model", "demo-ctc", "--format", "srt", "-o",
                     str(tmp_path / "subs2")]) == 0
    assert (tmp_path / "subs2" / f"{CLIP2.stem}.srt").read_text(encoding="utf-8") == srt


def test_subtitle_usage_errors(capsys, tmp_path: Path) -> None:
    def error(*argv: str) -> str:
        assert cli.main(["transcribe", *argv, "--model", "demo-ctc"]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        return err

    assert "give -o FOLDER for these 2 files" in error(str(CLIP), str(CLIP2), "--format", "srt")
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / CLIP.name).write_bytes(CLIP.read_bytes())
    assert "would both write" in error(str(CLIP), str(twin / CLIP.name), "--format", "vtt", "-o", str(tmp_path / "s"))
    taken = tmp_path / "file"
    taken.write_text("x")
    assert "is a file, expected a folder" in error(str(CLIP), str(CLIP2), "--format", "srt", "-o", str(taken))
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())  # refused before decoding


def test_limits_are_exact_in_milliseconds() -> None:
    """A pause of exactly CUE_PAUSE splits and a cue of exactly CUE_SECONDS does not, whatever float rounding
    of the times (1.3 + 1.0 != 2.3 in floats: such a pause used to join its words)."""
    assert CUE_PAUSE == 1.0 and CUE_SECONDS == 7.0
    assert len(subtitle_cues(record([("a", 1.0, 1.3), ("b", 2.3, 2.5)]))) == 2
    for k in range(300):  # pauses of exactly 1 s on a 40 ms grid
        t = 0.04 * k
        assert len(subtitle_cues(record([("a", t, t + 0.3), ("b", t + 1.3, t + 1.5)]))) == 2, k
    assert len(subtitle_cues(record([("a", 0.12, 0.5), ("b", 6.0, 7.12)]))) == 2  # (pause of 5.5 s)
    assert len(subtitle_cues(record([("a", 0.12, 0.5), ("b", 1.0, 7.12)]))) == 1  # exactly 7 s


def test_records_without_word_times_follow_the_same_rules() -> None:
    """A tokenizer that cannot spell pieces gives no word times: the text's words, times spread over the
    tokens' starts. It was one cue, one line, however long."""
    words = [f"w{k:02d}" for k in range(60)]
    rec = {"audio": "a.wav", "text": " ".join(words), "tokens": [{"id": 1, "start": 0.5 * k} for k in range(60)]}
    cues = subtitle_cues(rec)
    assert " ".join(t.replace("\n", " ") for _, _, t in cues) == rec["text"]
    assert len(cues) > 1 and all(e - s <= CUE_SECONDS and len(t.split("\n")) <= CUE_LINES for s, e, t in cues)
    assert all(len(line) <= CUE_CHARS for _, _, t in cues for line in t.split("\n"))


def test_webvtt_escapes_its_markup_characters() -> None:
    rec = record([("r&b", 0.0, 0.4), ("<3", 0.5, 0.9)])
    assert format_records([rec], "vtt").endswith("\nr&amp;b &lt;3\n")
    assert format_records([rec], "srt").endswith("\nr&b <3\n")
