"""Long files: windows cut at pauses (overlap where none), each decoded whole, joined with file times."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from asrdecode import cli
from asrdecode.audio import SAMPLE_RATE, read_audio
from asrdecode.errors import DecodingInputError
from asrdecode.long_audio import (WindowConfig, decode_files, decode_long, join_hypotheses, length_batches, pause_runs,
                                  plan_files, plan_windows)
from asrdecode.progress import PeriodicStatus
from asrdecode.results import Hypothesis
from hypothesis import given, settings
from hypothesis import strategies as st

REAL = Path(__file__).resolve().parents[2] / "data" / "real"
CLIP_A = REAL / "cards-001.wav"
CLIP_B = REAL / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"


def speechlike(seconds: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(int(seconds * SAMPLE_RATE), generator=g) * 0.1


def quiet(seconds: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(int(seconds * SAMPLE_RATE), generator=g) * 1e-4


def check_cover(windows, n: int, cfg: WindowConfig, align: int) -> None:
    """Windows cover [0, n), kept ranges tile it, no window is longer than the maximum."""
    assert windows[0].start == windows[0].keep_from == 0 and windows[-1].end == windows[-1].keep_to == n
    for a, b in zip(windows, windows[1:]):
        assert a.keep_to == b.keep_from and b.start <= a.keep_to <= a.end
        assert a.end % align == 0 and b.start % align == 0 and a.keep_to % align == 0
    for w in windows:
        assert w.start <= w.keep_from < w.keep_to <= w.end
        assert w.end - w.start <= cfg.max_window_seconds * SAMPLE_RATE


def test_pause_runs() -> None:
    q = torch.tensor([0, 1, 1, 1, 0, 1, 0, 1, 1], dtype=torch.bool).numpy()
    assert pause_runs(q, 2) == [(1, 4), (7, 9)]
    assert pause_runs(q, 1) == [(1, 4), (5, 6), (7, 9)]


def test_cuts_fall_in_the_pauses() -> None:
    parts, pauses, pos = [], [], 0
    for k in range(6):  # 7 s of "speech", then 0.5 s of quiet
        parts += [speechlike(7.0, k), quiet(0.5, 100 + k)]
        pos += 7 * SAMPLE_RATE
        pauses.append((pos, pos + SAMPLE_RATE // 2))
        pos += SAMPLE_RATE // 2
    wave = torch.cat(parts)
    cfg = WindowConfig(max_window_seconds=20.0, min_window_seconds=6.0)
    windows = plan_windows(wave, cfg, align=320)
    check_cover(windows, wave.numel(), cfg, 320)
    assert len(windows) >= 3
    for w in windows[:-1]:  # no overlap: every cut is inside a pause
        assert w.end == w.keep_to and any(s <= w.end <= e for s, e in pauses), w


def test_no_pause_overlaps_and_joins_at_the_overlap() -> None:
    wave = speechlike(50.0, 7)
    cfg = WindowConfig(max_window_seconds=20.0, min_window_seconds=8.0, overlap_seconds=3.0)
    windows = plan_windows(wave, cfg, align=1280)
    check_cover(windows, wave.numel(), cfg, 1280)
    for a, b in zip(windows, windows[1:]):
        assert b.start < a.end and a.end - b.start >= 3.0 * SAMPLE_RATE - 1280
        assert b.start <= a.keep_to <= a.end  # the join is inside the overlap


def test_short_wave_is_one_window_and_bad_configs() -> None:
    w = speechlike(5.0, 1)
    assert [(x.start, x.end) for x in plan_windows(w)] == [(0, w.numel())]
    with pytest.raises(DecodingInputError, match="min_window_seconds"):
        WindowConfig(max_window_seconds=5, min_window_seconds=10)
    with pytest.raises(DecodingInputError, match="overlap_seconds"):
        WindowConfig(min_window_seconds=2, overlap_seconds=3)
    with pytest.raises(DecodingInputError, match="max_window_seconds"):
        WindowConfig(max_window_seconds=float("nan"))
    with pytest.raises(DecodingInputError, match="align"):
        plan_windows(w, align=0)
    with pytest.raises(DecodingInputError, match="1-D"):
        plan_windows(w[None])


def test_join_shifts_times_and_keeps_each_half_of_an_overlap() -> None:
    a = Hypothesis(tokens=[1, 2, 3, 4], timestamps=[0, 5, 12, 18], score=-1.0,
                   words=[("one", 0, 1), ("two", 5, 6), ("three", 12, 13), ("four", 18, 19)])
    b = Hypothesis(tokens=[3, 4, 5], timestamps=[2, 8, 14], score=-2.0,
                   words=[("three", 2, 3), ("four", 8, 9), ("five", 14, 15)])
    # window b starts at frame 10 of the file; the join is at frame 15
    got = join_hypotheses([(a, 0, 0, 15), (b, 10, 15, 10**9)], text_of=lambda t: "unused")
    assert got.tokens == [1, 2, 3, 4, 5] and got.timestamps == [0, 5, 12, 18, 24]
    assert got.words == [("one", 0, 1), ("two", 5, 6), ("three", 12, 13), ("four", 18, 19), ("five", 24, 25)]
    assert got.text == "one two three four five" and got.score == pytest.approx(-3.0)
    plain = join_hypotheses([(Hypothesis([7], [3], 0.0), 0, 0, 5), (Hypothesis([8], [1], 0.0), 4, 5, 10**9)],
                            text_of=lambda t: "-".join(map(str, t)))
    assert plain.text == "7-8" and plain.timestamps == [3, 5] and plain.words is None


def test_windows_decoded_whole_and_joined_in_file_time() -> None:
    """Two real clips with 1 s of quiet between them, windows that must cut in the quiet: the result is
    each window's own whole decoding, its frames shifted by the window's start."""
    from asrdecode.models import load
    from asrdecode.pipeline import make_pipeline
    from asrdecode.registry import resolve_options

    bundle = load("demo-ctc")
    pipe = make_pipeline(bundle, resolve_options(bundle, {"decoder": "greedy"}))
    a, b = read_audio(CLIP_A), read_audio(CLIP_B)
    wave = torch.cat([a, quiet(1.0, 3), b])
    longest = max(a.numel(), b.numel()) / SAMPLE_RATE
    cfg = WindowConfig(max_window_seconds=longest + 0.9, min_window_seconds=1.0, overlap_seconds=0.5)
    per_frame = round(bundle.frame_seconds * SAMPLE_RATE)
    windows = plan_windows(wave, cfg, align=per_frame)
    assert len(windows) == 2 and a.numel() <= windows[0].end <= a.numel() + SAMPLE_RATE
    got = decode_long(pipe, wave, bundle.frame_seconds, bundle.tokenizer.decode, cfg)
    each = [pipe.decode(*pipe.encode([wave[w.start:w.end]]))[0] for w in windows]
    assert got.tokens == each[0].tokens + each[1].tokens
    assert got.timestamps == each[0].timestamps + [t + windows[1].start // per_frame for t in each[1].timestamps]
    assert got.text == bundle.tokenizer.decode(got.tokens) and got.text
    assert all(t * per_frame >= windows[1].start for t in got.timestamps[len(each[0].tokens):])


@pytest.mark.parametrize("model, decoder", [("demo-ctc", "beam"), ("demo-rnnt", "greedy")])
def test_transcribe_long_file_shorter_than_a_window_equals_whole_file(capsys, model, decoder) -> None:
    beam = ["--beam", "4"] if decoder == "beam" else []
    args = [str(CLIP_B), str(CLIP_A), "--model", model, "--decoder", decoder, *beam, "--format", "json"]
    assert cli.main(["transcribe", *args, "--long-audio-seconds", "2"]) == 0
    long = json.loads(capsys.readouterr().out)
    assert cli.main(["transcribe", *args]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert read_audio(CLIP_B).numel() > 2 * SAMPLE_RATE
    assert [r["text"] for r in long] == [r["text"] for r in whole]
    assert [r["words"] for r in long] == [r["words"] for r in whole]
    assert cli.main(["transcribe", str(CLIP_A), "--long-audio-seconds", "0"]) == 2
    assert "--long-audio-seconds" in capsys.readouterr().err


def test_periodic_status_prints_one_line_per_period() -> None:
    now = [0.0]
    out = io.StringIO()
    bar = PeriodicStatus(100.0, "decoding long audio", "s", out, 60.0, clock=lambda: now[0])
    for _ in range(10):  # 10 updates of 10 s of audio, 25 s apart
        now[0] += 25.0
        bar.update(10.0)
    lines = out.getvalue().splitlines()
    assert lines == ["asrdecode: decoding long audio: 30.0 / 100.0 s", "asrdecode: decoding long audio: 60.0 / 100.0 s",
                     "asrdecode: decoding long audio: 90.0 / 100.0 s"]
    with pytest.raises(DecodingInputError, match="every_s"):
        PeriodicStatus(1.0, "x", "s", out, 0.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 1000), max_size=60), st.integers(1, 20), st.integers(1, 3000))
def test_length_batches_cover_every_item_within_the_bounds(lengths, max_items, max_padded) -> None:
    batches = length_batches(lengths, max_items, max_padded)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert 1 <= len(b) <= max_items
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= max_padded
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)  # similar lengths together: the least padding


class CountingPipeline:
    """A pipeline whose hypothesis of a wave is its length, recording each call's batch."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def encode(self, waves):
        self.calls.append([w.numel() for w in waves])
        return torch.tensor([w.numel() for w in waves]), None

    def decode_nbest(self, sizes, _):
        return [[Hypothesis(tokens=[int(n)], timestamps=[0], score=0.0)] for n in sizes.tolist()]


def test_whole_files_are_decoded_in_bounded_batches_in_their_order() -> None:
    """A folder of many short files and one near the long-audio threshold used to be one batch padded to the
    longest: 200 short clips beside a 55 s one took 4.3x the time and 2.5 GB more (demo-rnnt)."""
    sizes = [SAMPLE_RATE * s for s in (2, 55, 3, 2, 1, 4, 2, 2, 3)] * 5
    waves = [torch.zeros(n) for n in sizes]
    pipe, done = CountingPipeline(), []
    got = decode_files(None, pipe, waves, long_audio_seconds=60.0, batch_files=8, batch_seconds=20.0,
                       on_audio=done.append)
    assert [h[0].tokens for h in got] == [[n] for n in sizes]  # each result in its file's place
    assert sorted(n for call in pipe.calls for n in call) == sorted(sizes)
    for call in pipe.calls:
        assert len(call) <= 8 and (len(call) == 1 or len(call) * max(call) <= 20 * SAMPLE_RATE)
    assert [len(c) for c in pipe.calls if max(c) == 55 * SAMPLE_RATE] == [1] * 5  # the long ones alone
    batches, long = plan_files(sizes, 60.0, batch_files=8, batch_seconds=20.0)  # the plan the CLI's bar reads
    assert [[sizes[i] for i in b] for b in batches] == pipe.calls and long == []
    assert plan_files(sizes, 30.0)[1] == [k for k, n in enumerate(sizes) if n > 30 * SAMPLE_RATE]
    assert sum(done) == pytest.approx(sum(sizes) / SAMPLE_RATE)
    with pytest.raises(DecodingInputError, match="batch_files"):
        decode_files(None, pipe, waves, batch_files=0)
    with pytest.raises(DecodingInputError, match="batch_seconds"):
        decode_files(None, pipe, waves, batch_seconds=0.0)
