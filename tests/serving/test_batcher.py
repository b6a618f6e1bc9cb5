"""The dynamic batcher on its own: batch size, wait, one chunk per stream, order, back-pressure."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from asrdecode.serving.batcher import BatcherClosed, ChunkOutcome, DynamicBatcher

pytestmark = pytest.mark.timeout(60)


class Recorder:
    """A step that records each call and returns, per stream, the chunk values it was given."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[dict, set]] = []
        self.delay = delay
        self.gate = gate
        self.threads: set[int] = set()

    def __call__(self, chunks: dict, final: set) -> dict:
        self.threads.add(threading.get_ident())
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.delay:
            time.sleep(self.delay)
        self.calls.append((dict(chunks), set(final)))
        return {k: ("seen", v) for k, v in chunks.items()}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 50))


def test_max_batch_one_chunk_per_stream_and_order():
    rec = Recorder(delay=0.002)

    async def main():
        b = DynamicBatcher(rec, max_batch=3, max_wait_ms=50, max_pending=10, keep_history=True)
        await b.start()
        futs = {}
        for s in range(7):
            b.open(s)
        for i in range(4):  # 4 chunks for each of 7 streams, all queued at once
            for s in range(7):
                futs[s, i] = await b.put(s, (s, i), final=(i == 3))
        outs = {k: await f for k, f in futs.items()}
        await b.stop()
        return b, outs

    b, outs = run(main())
    assert all(1 <= len(c) <= 3 for c, _ in rec.calls)
    # each stream's chunks are decoded in order, one per batch
    seen: dict[int, list[int]] = {}
    for chunks, final in rec.calls:
        assert len(set(chunks)) == len(chunks)
        for s, (s2, i) in chunks.items():
            assert s == s2
            seen.setdefault(s, []).append(i)
            assert (s in final) == (i == 3)
    assert seen == {s: [0, 1, 2, 3] for s in range(7)}
    # results are routed to the right futures, with timing
    for (s, i), out in outs.items():
        assert isinstance(out, ChunkOutcome)
        assert out.result == ("seen", (s, i))
        assert out.queue_ms >= 0 and out.compute_ms >= 1.5 and 1 <= out.batch_size <= 3
    assert len(rec.threads) == 1  # one worker thread
    assert sum(len(r.keys) for r in b.history) == 28
    # full batches while enough streams were ready: the first batches are full
    assert [len(r.keys) for r in b.history[:2]] == [3, 3]


def test_max_wait_starts_a_partial_batch():
    rec = Recorder()

    async def main(wait_ms):
        b = DynamicBatcher(rec, max_batch=8, max_wait_ms=wait_ms)
        await b.start()
        b.open("a")
        t0 = time.perf_counter()
        out = await (await b.put("a", 1, final=True))
        elapsed = time.perf_counter() - t0
        await b.stop()
        return out, elapsed

    out, elapsed = run(main(400))
    assert out.batch_size == 1
    assert 0.39 <= elapsed < 3.0 and out.queue_ms >= 390
    out, elapsed = run(main(0))
    assert out.queue_ms < 200


def test_full_batch_does_not_wait():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, max_batch=4, max_wait_ms=20000)
        await b.start()
        futs = []
        for s in range(4):
            b.open(s)
            futs.append(await b.put(s, s, final=True))
        t0 = time.perf_counter()
        outs = [await f for f in futs]
        await b.stop()
        return outs, time.perf_counter() - t0

    outs, elapsed = run(main())
    assert elapsed < 5.0
    assert {o.batch_size for o in outs} == {4} and len({o.batch_index for o in outs}) == 1


def test_oldest_chunk_first():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, max_batch=2, max_wait_ms=0)
        now = time.perf_counter()
        await b.start()
        futs = []
        for s, age in (("young", 0.0), ("old", 3.0), ("middle", 1.0)):
            b.open(s)
            # arrival times in the past: queued in one go before the batching task runs
            futs.append(b._enqueue(s, b._streams[s], s, True, now - age))
        await asyncio.gather(*futs)
        await b.stop()

    run(main())
    assert [sorted(c) for c, _ in rec.calls] == [["middle", "old"], ["young"]]


def test_back_pressure_bounds_pending_chunks():
    gate = threading.Event()
    rec = Recorder(gate=gate)

    async def main():
        b = DynamicBatcher(rec, max_batch=4, max_wait_ms=0, max_pending=2)
        await b.start()
        b.open("s")
        f1 = await b.put("s", 1)
        f2 = await b.put("s", 2)
        assert b.pending("s") == 2
        third = asyncio.create_task(b.put("s", 3))
        await asyncio.sleep(0.3)
        assert not third.done()  # the third chunk waits: the stream's queue is full
        assert b.pending("s") == 2
        gate.set()
        await f1
        f3 = await asyncio.wait_for(third, 10)
        assert b.pending("s") <= 2
        await f2
        await f3
        fin = b.finish("s", 0)
        await fin
        await b.stop()
        return [c for c, _ in rec.calls]

    calls = run(main())
    assert [c["s"] for c in calls] == [1, 2, 3, 0]


def test_finish_marks_the_queued_tail_final_or_adds_an_empty_chunk():
    gate = threading.Event()
    rec = Recorder(gate=gate)

    async def main():
        b = DynamicBatcher(rec, max_batch=2, max_wait_ms=0, max_pending=4)
        await b.start()
        b.open("a")
        b.open("b")
        fa1 = await b.put("a", "a1")
        await asyncio.sleep(0.05)  # a1 is in the (blocked) batch
        fa2 = await b.put("a", "a2")
        fin_a = b.finish("a", "empty")
        assert fin_a is fa2  # the queued tail became the final chunk
        fb1 = await b.put("b", "b1")
        gate.set()
        await fb1
        await fa1
        await fa2
        assert b.pending("b") == 0
        fin_b = b.finish("b", "empty")  # nothing queued: an empty final chunk
        await fin_b
        with pytest.raises(KeyError):
            await b.put("a", "late")  # a is closed after its final chunk
        await b.stop()

    run(main())
    assert rec.calls == [({"a": "a1"}, set()), ({"a": "a2", "b": "b1"}, {"a"}), ({"b": "empty"}, {"b"})]


def test_cancel_drops_queued_chunks_and_others_go_on():
    gate = threading.Event()
    rec = Recorder(gate=gate)

    async def main():
        b = DynamicBatcher(rec, max_batch=1, max_wait_ms=0, max_pending=4)
        await b.start()
        b.open("x")
        b.open("y")
        fx1 = await b.put("x", 1)
        await asyncio.sleep(0.05)
        fx2 = await b.put("x", 2)
        fy = await b.put("y", 3, final=True)
        b.cancel("x")
        assert fx2.cancelled()
        gate.set()
        await fx1  # the running batch finishes
        out = await fy
        await b.stop()
        return out

    out = run(main())
    assert out.result == ("seen", 3)
    assert [list(c) for c, _ in rec.calls] == [["x"], ["y"]]


def test_step_error_fails_its_batch_only():
    calls = []

    def step(chunks, final):
        calls.append(dict(chunks))
        if "bad" in chunks.values():
            raise RuntimeError("boom")
        return {k: v * 2 for k, v in chunks.items()}

    async def main():
        b = DynamicBatcher(step, max_batch=2, max_wait_ms=0)
        await b.start()
        b.open(1)
        b.open(2)
        f1 = await b.put(1, "bad")
        await asyncio.sleep(0.1)
        f2 = await b.put(2, 21, final=True)
        with pytest.raises(RuntimeError, match="boom"):
            await f1
        out = await f2
        await b.stop()
        return out

    assert run(main()).result == 42


def test_a_failing_stream_does_not_fail_its_batch():
    """Two streams in one batch, one chunk raises: the batch is retried without it (isolation)."""
    calls = []

    def step(chunks, final):
        calls.append(sorted(chunks))
        if "bad" in chunks.values():
            raise RuntimeError("boom")
        return {k: v * 2 for k, v in chunks.items()}

    async def main():
        b = DynamicBatcher(step, max_batch=3, max_wait_ms=200)
        await b.start()
        for k in (1, 2, 3):
            b.open(k)
        f1 = await b.put(1, "bad")
        f1_next = await b.put(1, 5)       # queued behind the failing chunk: fails with its stream
        f2 = await b.put(2, 21)
        f3 = await b.put(3, 4, final=True)
        with pytest.raises(RuntimeError, match="boom"):
            await f1
        with pytest.raises(RuntimeError, match="boom"):
            await f1_next
        with pytest.raises(RuntimeError, match="boom"):  # the stream failed: no more chunks
            await b.put(1, 6)
        out2, out3 = await f2, await f3
        f2b = await b.put(2, 1, final=True)  # the other streams go on
        out2b = await f2b
        await b.stop()
        return out2, out3, out2b, b

    out2, out3, out2b, b = run(main())
    assert (out2.result, out3.result, out2b.result) == (42, 8, 2)
    assert out2.batch_size == 3  # the outcome reports the batch the chunk came in
    assert calls[:4] == [[1, 2, 3], [1], [2], [3]]  # no culprit named: each stream alone
    assert (b.failed_batches, b.failed_chunks) == (1, 1)


def test_stop_drains_or_cancels():
    async def main(drain):
        gate = threading.Event()
        rec = Recorder(gate=gate)
        b = DynamicBatcher(rec, max_batch=1, max_wait_ms=0, max_pending=8)
        await b.start()
        b.open("s")
        futs = [await b.put("s", i) for i in range(3)]
        await asyncio.sleep(0.05)
        stopping = asyncio.create_task(b.stop(drain=drain))
        await asyncio.sleep(0.05)
        with pytest.raises(BatcherClosed):
            await b.put("s", 99)
        gate.set()
        await stopping
        assert not b.running
        return [f.exception() if not f.cancelled() and f.exception() else f.result() for f in futs]

    drained = run(main(True))
    assert [o.result for o in drained] == [("seen", 0), ("seen", 1), ("seen", 2)]
    cancelled = run(main(False))
    assert cancelled[0].result == ("seen", 0)  # the batch in flight finished
    assert all(isinstance(e, BatcherClosed) for e in cancelled[1:])


def test_bad_arguments():
    for kw in ({"max_batch": 0}, {"max_batch": 1.5}, {"max_wait_ms": -1}, {"max_wait_ms": float("nan")},
               {"max_pending": 0}):
        with pytest.raises(ValueError):
            DynamicBatcher(lambda c, f: {}, **kw)
    with pytest.raises(TypeError):
        DynamicBatcher(None)


class ReencodingCTC:
    """A real batched decoding callable from library calls: each step re-encodes every stream's
    audio received so far with demo-ctc (one padded batch) and decodes it with ``ctc.greedy``."""

    def __init__(self) -> None:
        from asrdecode.models import load

        self.demo = load("demo-ctc")
        self.audio: dict = {}

    def __call__(self, chunks: dict, final: set) -> dict:
        from asrdecode import ctc

        keys = list(chunks)
        for k in keys:
            self.audio[k] = np.concatenate([self.audio.get(k, np.zeros(0, np.float32)), chunks[k]])
        with torch.inference_mode():
            lp, n = self.demo.model.log_probs([torch.from_numpy(self.audio[k]) for k in keys])
            hyps = ctc.greedy(lp, n, self.demo.blank_id, self.demo.tokenizer)
        for k in final:
            del self.audio[k]
        return {k: h.text for k, h in zip(keys, hyps)}


def test_real_decoder_through_the_batcher_matches_offline():
    from asrdecode import ctc
    from asrdecode.audio import read_audio

    dec = ReencodingCTC()
    clips = {name: read_audio(f"data/real/{name}.wav").numpy() for name in ("cards-001", "cards-003", "cards-002")}
    with torch.inference_mode():
        lp, n = dec.demo.model.log_probs([torch.from_numpy(c) for c in clips.values()])
    offline = {k: h.text for k, h in zip(clips, ctc.greedy(lp, n, dec.demo.blank_id, dec.demo.tokenizer))}
    step = 8000  # 0.5 s chunks

    async def client(b, name, audio):
        b.open(name)
        futs = []
        for start in range(0, len(audio), step):
            futs.append(await b.put(name, audio[start:start + step]))
            await asyncio.sleep(0.01)
        futs.append(b.finish(name, np.zeros(0, np.float32)))
        outs = [await f for f in futs]
        return outs[-1].result

    async def main():
        b = DynamicBatcher(dec, max_batch=3, max_wait_ms=20, keep_history=True)
        await b.start()
        texts = await asyncio.gather(*(client(b, k, v) for k, v in clips.items()))
        await b.stop()
        return dict(zip(clips, texts)), b

    texts, b = run(main())
    assert texts == offline and all(texts.values())
    assert max(len(r.keys) for r in b.history) > 1  # streams were batched together
