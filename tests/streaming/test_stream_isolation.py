"""One hostile stream never changes another stream's result (issue 15, "isolation").

- ``StreamDecoder.step`` refuses hostile audio (huge finite samples, NaN / inf, wrong type or
  shape) with a :class:`StreamInputError` naming exactly those streams, and changes nothing;
- a failure inside the batched decoder call (injected after the call has run) changes nothing
  either, so :func:`isolate_failures` can step the good streams again;
- property: random hostile streams beside good ones, through the dynamic batcher the server uses:
  every good stream's final result equals decoding it alone, every hostile stream fails alone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("sentencepiece")

from asrdecode import ctc  # noqa: E402
from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.serving.batcher import DynamicBatcher, isolate_failures  # noqa: E402
from asrdecode.streaming import MAX_ABS_SAMPLE, StreamDecoder, StreamInputError  # noqa: E402
from asrdecode.transducer import BeamSearchDecoder, GreedyDecoder  # noqa: E402

pytestmark = pytest.mark.timeout(300)

DATA = Path(__file__).resolve().parents[2] / "data" / "real"
FRONT = dict(block_frames=4, left_context=1, right_context=1)  # small blocks: several steps per short clip


@pytest.fixture(scope="module")
def bundles() -> dict:
    return {name: load(name) for name in ("demo-rnnt", "demo-ctc")}


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    return [read_audio(DATA / "cards-001.wav")[:15000].numpy(), read_audio(DATA / "cards-003.wav")[2000:20000].numpy(),
            read_audio(DATA / "cards-002.wav")[:12000].numpy()]


def _same(a, b) -> None:
    assert a.tokens == b.tokens and a.timestamps == b.timestamps
    assert a.score == pytest.approx(b.score, rel=1e-5, abs=1e-4)


HOSTILE = {
    "1e30": lambda n: np.full(n, 1e30, np.float32),           # the reproduction
    "just over": lambda n: np.full(n, MAX_ABS_SAMPLE * 1.01, np.float32),
    "-3e38": lambda n: np.full(n, -3e38, np.float32),
    "nan": lambda n: np.full(n, np.nan, np.float32),
    "inf": lambda n: np.concatenate([np.zeros(n - 1, np.float32), np.array([np.inf], np.float32)]),
    "int16": lambda n: np.zeros(n, np.int16),
    "2-D": lambda n: np.zeros((2, n // 2), np.float32),
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_hostile_chunk_is_refused_by_name_and_changes_nothing(bundles, clips, what):
    dec = StreamDecoder(bundles["demo-rnnt"], "greedy", **FRONT)
    good, other = clips[0], clips[1]
    for sid in ("good", "bad", "other"):
        dec.open(sid)
    dec.step({"good": good[:6000], "other": other[:3000]})
    with pytest.raises(StreamInputError) as info:
        dec.step({"good": good[6000:], "bad": HOSTILE[what](40000), "other": other[3000:9000]}, final={"good"})
    assert info.value.stream_ids == ["bad"]
    assert isinstance(info.value, DecodingInputError) and "'bad'" in str(info.value)
    assert isinstance(info.value.errors["bad"], DecodingInputError)
    assert set(dec.streams) == {"good", "bad", "other"}  # nothing changed: step again without "bad"
    out = dec.step({"good": good[6000:], "other": other[3000:]}, final={"good", "other"})
    _same(out["good"].hypothesis, dec.offline(good))
    _same(out["other"].hypothesis, dec.offline(other))


def test_several_hostile_streams_are_all_named(bundles, clips):
    dec = StreamDecoder(bundles["demo-rnnt"], "greedy", **FRONT)
    for sid in ("a", "b", "c"):
        dec.open(sid)
    with pytest.raises(StreamInputError) as info:
        dec.step({"a": HOSTILE["nan"](3000), "b": clips[0], "c": HOSTILE["1e30"](3000)})
    assert sorted(info.value.stream_ids) == ["a", "c"]


def test_offline_refuses_huge_samples(bundles):
    dec = StreamDecoder(bundles["demo-rnnt"], "greedy", **FRONT)
    with pytest.raises(DecodingInputError, match="magnitude"):
        dec.offline(np.full(20000, 1e30, np.float32))


def test_non_finite_frames_are_that_streams_error(bundles, clips, monkeypatch):
    """The backstop behind the range check: a front end that yields NaN frames for one stream."""
    dec = StreamDecoder(bundles["demo-rnnt"], "greedy", **FRONT)
    dec.open("good")
    dec.open("bad")
    real = dec.front.frames

    def frames(buf, final):
        f = real(buf, final)
        return f if buf.received != 17777 else torch.full_like(f, float("nan"))

    monkeypatch.setattr(dec.front, "frames", frames)
    with pytest.raises(StreamInputError) as info:
        dec.step({"good": clips[0], "bad": np.zeros(17777, np.float32)}, final={"good", "bad"})
    assert info.value.stream_ids == ["bad"]
    out = dec.step({"good": clips[0]}, final={"good"})
    _same(out["good"].hypothesis, dec.offline(clips[0]))


def _fail_batches_after_running(cls, name: str, monkeypatch) -> None:
    """Make ``cls.name`` (a decoder's batched ``advance(state, x, lengths, ...)``) run for real, then raise
    when its batch holds more than one non-empty utterance: the failure comes after the call changed
    what it was given."""
    real = getattr(cls, name)

    def call(self, state, x, *args, **kwargs):
        out = real(self, state, x, *args, **kwargs)
        if x.shape[0] > 1 and x.shape[1] > 0:
            raise RuntimeError("injected failure inside a batched call")
        return out

    monkeypatch.setattr(cls, name, call)


@pytest.mark.parametrize("model,decoder,module,name", [
    ("demo-rnnt", "greedy", GreedyDecoder, "advance"),
    ("demo-rnnt", "beam", BeamSearchDecoder, "advance"),
    ("demo-ctc", "beam", ctc.CTCBeamDecoder, "advance"),
])
def test_failure_inside_the_batched_call_changes_nothing(bundles, clips, monkeypatch, model, decoder, module, name):
    options = dict(FRONT, **({"beam": 3} if decoder == "beam" else {}))
    dec = StreamDecoder(bundles[model], decoder, **options)
    expected = [dec.offline(c) for c in clips]
    _fail_batches_after_running(module, name, monkeypatch)
    ids = ["a", "b", "c"]
    for sid in ids:
        dec.open(sid)
    cuts = [0, 5000, 11000, None]
    failures = injected = 0
    for k in range(3):
        chunks = {sid: c[cuts[k]:cuts[k + 1]] for sid, c in zip(ids, clips)}
        final = set(ids) if k == 2 else set()
        try:
            results = dec.step(chunks, final)
        except RuntimeError as err:
            assert "injected" in str(err)
            injected += 1
            results, errors = isolate_failures(dec.step, chunks, final)  # every stream alone: no failure
            failures += len(errors)
    assert injected >= 2 and failures == 0 and len(dec) == 0
    for sid, exp in zip(ids, expected):
        _same(results[sid].hypothesis, exp)


def test_isolate_failures_steps_the_rest_together():
    calls = []

    class Named(ValueError):
        def __init__(self, errors):
            super().__init__("named")
            self.errors = errors

    def step(chunks, final):
        calls.append(sorted(chunks))
        bad = {k: ValueError(f"bad {k}") for k, v in chunks.items() if v == "bad"}
        if bad:
            raise Named(bad)
        if "boom" in chunks.values() and len(chunks) > 1:
            raise RuntimeError("somewhere")
        if "boom" in chunks.values():
            raise RuntimeError("boom alone")
        return {k: (v, k in final) for k, v in chunks.items()}

    results, errors = isolate_failures(step, {1: "x", 2: "bad", 3: "y", 4: "bad"}, {1, 2})
    assert results == {1: ("x", True), 3: ("y", False)}
    assert sorted(errors) == [2, 4] and str(errors[2]) == "bad 2"
    assert calls == [[1, 2, 3, 4], [1, 3]]  # the named ones dropped, the rest in one batch
    calls.clear()
    results, errors = isolate_failures(step, {1: "x", 2: "boom", 3: "y"}, {3})
    assert results == {1: ("x", False), 3: ("y", True)} and list(errors) == [2]
    assert calls == [[1, 2, 3], [1], [2], [3]]  # no culprit named: each alone
    assert isolate_failures(step, {}, set()) == ({}, {})


# -- property: hostile streams beside good ones, through the batcher ---------------------------------


def _hostile_kinds() -> list:
    return sorted(HOSTILE) + ["list", "poison"]


@st.composite
def scenarios(draw):
    n_good = draw(st.integers(1, 3))
    good = [(draw(st.integers(0, 2)), draw(st.lists(st.integers(800, 9000), min_size=1, max_size=4)))
            for _ in range(n_good)]
    hostile = draw(st.lists(st.tuples(st.sampled_from(_hostile_kinds()), st.integers(0, 3), st.integers(1, 20000)),
                            min_size=1, max_size=3))
    max_batch = draw(st.sampled_from([2, 4, 8]))
    return good, hostile, max_batch


@pytest.fixture(scope="module")
def greedy_setup(bundles, clips):
    dec = StreamDecoder(bundles["demo-rnnt"], "greedy", **FRONT)
    return dec, [dec.offline(c) for c in clips]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenario=scenarios())
def test_hostile_streams_never_change_good_streams(greedy_setup, clips, scenario):
    dec, expected = greedy_setup
    good, hostile, max_batch = scenario
    poisoned = {f"h{j}" for j, (kind, _, _) in enumerate(hostile) if kind == "poison"}

    def step(chunks, final):
        with torch.inference_mode():
            if poisoned & set(chunks):  # a failure whose culprit the error does not name
                raise RuntimeError("poisoned batch")
            return dec.step(chunks, final)

    async def good_stream(b, sid, clip, sizes):
        audio = clips[clip]
        await b.call(dec.open, sid)  # the decoder is used on the batcher's worker thread only
        b.open(sid)
        futs, pos, k = [], 0, 0
        while pos < len(audio):
            n = sizes[k % len(sizes)]
            futs.append(await b.put(sid, audio[pos:pos + n]))
            pos, k = pos + n, k + 1
        futs.append(b.finish(sid, np.zeros(0, np.float32)))
        outs = await asyncio.gather(*futs)
        return outs[-1].result

    def close(sid):
        if sid in dec:
            dec.close(sid)

    async def hostile_stream(b, sid, kind, when, n):
        await b.call(dec.open, sid)
        b.open(sid)
        try:
            for _ in range(when):  # some good audio first
                await (await b.put(sid, np.zeros(1600, np.float32)))
            chunk = [0.0] * n if kind == "list" else (np.zeros(n, np.float32) if kind == "poison"
                                                      else HOSTILE[kind](max(n, 2)))
            await (await b.put(sid, chunk))
            return None
        except Exception as err:  # noqa: BLE001 - the failure is the point
            return err
        finally:
            b.cancel(sid)
            await b.call(close, sid)

    async def main():
        b = DynamicBatcher(step, max_batch=max_batch, max_wait_ms=5)
        await b.start()
        try:
            tasks = [good_stream(b, f"g{i}", c, s) for i, (c, s) in enumerate(good)]
            tasks += [hostile_stream(b, f"h{j}", kind, when, n) for j, (kind, when, n) in enumerate(hostile)]
            return await asyncio.wait_for(asyncio.gather(*tasks), 120)
        finally:
            await b.stop()

    outs = asyncio.run(main())
    for (clip, _), res in zip(good, outs[: len(good)]):
        assert res.final
        _same(res.hypothesis, expected[clip])
    for (kind, _, _), err in zip(hostile, outs[len(good):]):
        assert err is not None, kind
        if kind not in ("poison", "list"):
            assert isinstance(err, DecodingInputError), (kind, err)
    assert len(dec) == 0
