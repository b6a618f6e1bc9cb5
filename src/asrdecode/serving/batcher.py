"""A dynamic batcher: chunks of many streams -> one batched ``step`` call on a worker thread.

:class:`DynamicBatcher` is generic over a synchronous ``step(chunks, final) -> results``
callable (``chunks``: ``{key: chunk}``, ``final``: the keys whose chunk is their last;
``results``: ``{key: result}``), which it calls on **one** worker thread, one batch at a time
(a decoder holding per-stream state is not thread-safe). The batching rule is Triton's dynamic
batcher: a batch starts as soon as ``max_batch`` streams have a chunk ready, or when the
oldest ready chunk has waited ``max_wait_ms``, whichever comes first; a batch holds at most
one chunk per stream (a stream's chunks are decoded in order, each after the previous one's
batch finished), and streams are taken oldest-chunk first. ``max_batch=1`` turns batching off.

A chunk whose step fails (see *Isolation*) fails its stream: its future and those of the
stream's queued chunks get the error, and :meth:`DynamicBatcher.put` raises it from then on.

Every stream has a bounded queue: :meth:`DynamicBatcher.put` waits while the stream has
``max_pending`` chunks queued or being decoded, which is how the server stops reading a
client that sends faster than it is decoded (back-pressure).

Each chunk's future resolves to a :class:`ChunkOutcome` with its ``queue_ms`` (arrival ->
start of its batch) and ``compute_ms`` (the batch's ``step`` time), measured on the worker
thread with ``time.perf_counter``.

**Isolation.** ``step`` must change nothing when it raises (``StreamDecoder.step`` is all or
nothing). A failed batch is then retried by :func:`isolate_failures`: the streams an error names
(``err.errors``, a ``{key: error}`` mapping, as :class:`~asrdecode.streaming.StreamInputError`
has) fail and the others are stepped again together; an error that names no stream makes every
stream of the batch step alone. Only the chunks whose own step fails get an error; the others
get the result they would have had in a batch without the offending streams.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Mapping, Optional, TypeVar

from ..errors import check_int

__all__ = ["DynamicBatcher", "ChunkOutcome", "BatchRecord", "BatcherClosed", "isolate_failures"]

K = TypeVar("K", bound=Hashable)
StepFn = Callable[[dict, set], Mapping]


class BatcherClosed(RuntimeError):
    """The batcher is stopping or stopped and takes no new chunks."""


def isolate_failures(step: StepFn, chunks: dict, final: set) -> tuple[dict, dict]:
    """Run ``step(chunks, final)``; if it raises, find the streams that fail and step the rest.

    ``step`` must leave everything unchanged when it raises. An error with an ``errors`` mapping
    naming some of the batch's keys fails those keys (with their own errors) and the rest is
    stepped again as one batch; any other error makes each key step alone (``final`` restricted to
    it). Returns ``(results, errors)``: ``{key: result}`` of the keys whose step succeeded and
    ``{key: exception}`` of the others. At most ``len(chunks) + 1`` calls of ``step``.
    """
    try:
        out = step(chunks, final)
    except Exception as err:  # noqa: BLE001 - every error is some stream's; found below
        if len(chunks) <= 1:
            return {}, {k: err for k in chunks}
        named = getattr(err, "errors", None)
        named = {k: e for k, e in named.items() if k in chunks} if isinstance(named, Mapping) else {}
        if named:
            rest = {k: c for k, c in chunks.items() if k not in named}
            if not rest:
                return {}, named
            results, errors = isolate_failures(step, rest, {k for k in final if k in rest})
            return results, {**named, **errors}
        results, errors = {}, {}
        for k, c in chunks.items():
            r, e = isolate_failures(step, {k: c}, {k} & set(final))
            results.update(r)
            errors.update(e)
        return results, errors
    return (dict(out) if isinstance(out, Mapping) else {}), {}


@dataclass
class ChunkOutcome:
    """What one chunk's future resolves to."""

    result: Any               # results[key] from step (None if step returned nothing for the key)
    queue_ms: float           # arrival -> start of the step call of its batch
    compute_ms: float         # duration of that step call
    batch_size: int           # chunks in that batch
    batch_index: int          # 0, 1, 2, ... over the batcher's lifetime


@dataclass
class BatchRecord:
    """One executed batch (kept in :attr:`DynamicBatcher.history` when ``keep_history``)."""

    index: int
    keys: list
    final: set
    start: float              # perf_counter at step start
    compute_ms: float
    queue_ms: list[float]


@dataclass
class _Item:
    chunk: Any
    final: bool
    arrival: float
    future: asyncio.Future = field(repr=False)


@dataclass
class _Stream:
    queue: collections.deque = field(default_factory=collections.deque)
    pending: int = 0          # queued + in a running batch
    in_batch: bool = False
    finished: bool = False    # a final chunk was put
    failed: Optional[BaseException] = None  # its step failed: later chunks are refused with this
    space: Optional[asyncio.Event] = None


class DynamicBatcher(Generic[K]):
    """Collect chunks of distinct streams into batches for ``step`` (see the module docs).

    Args:
        step: ``step(chunks: dict[key, chunk], final: set[key]) -> Mapping[key, result]``.
        max_batch: most chunks (streams) per batch; 1 = no batching.
        max_wait_ms: how long the oldest ready chunk may wait for the batch to fill.
        max_pending: per-stream bound on chunks queued or being decoded (back-pressure).
        keep_history: keep a :class:`BatchRecord` of every batch in :attr:`history`.

    Use inside a running event loop: ``await start()``, then :meth:`put` / :meth:`finish` /
    :meth:`call` from coroutines, and ``await stop()``.
    """

    def __init__(self, step: StepFn, *, max_batch: int = 32, max_wait_ms: float = 10.0, max_pending: int = 8,
                 keep_history: bool = False) -> None:
        if not callable(step):
            raise TypeError("step must be callable")
        check_int("max_batch", max_batch, low=1, error=ValueError)
        if not (isinstance(max_wait_ms, (int, float)) and math.isfinite(max_wait_ms) and max_wait_ms >= 0):
            raise ValueError(f"max_wait_ms must be a finite number >= 0, got {max_wait_ms!r}")
        check_int("max_pending", max_pending, low=1, error=ValueError)
        self.step = step
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_pending = max_pending
        self.keep_history = keep_history
        self.history: list[BatchRecord] = []
        self.batches = 0
        self.chunks = 0
        self.failed_batches = 0   # batches whose step raised (then retried without the failing streams)
        self.failed_chunks = 0    # chunks whose own step failed
        self._streams: dict[Any, _Stream] = {}
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._task: Optional[asyncio.Task] = None
        self._changed: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._accepting = False
        self._stopping = False
        self._worker_thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the batching loop and its worker thread (in the running event loop)."""
        if self._task is not None:
            raise RuntimeError("DynamicBatcher.start: already started")
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="asrdecode-batch")
        self._accepting = True
        self._task = asyncio.create_task(self._run(), name="asrdecode-batcher")

    async def stop(self, *, drain: bool = True) -> None:
        """Stop taking chunks; with ``drain`` decode every queued chunk first, else cancel them.

        The batch being decoded always finishes. Then the worker thread ends.
        """
        if self._task is None:
            return
        self._accepting = False
        if not drain:
            for key in list(self._streams):
                self._drop_queued(key, BatcherClosed("the batcher stopped"))
        self._stopping = True
        self._wake()
        try:
            await asyncio.shield(self._task)
        finally:
            ex, self._executor = self._executor, None
            if ex is not None:
                await asyncio.get_running_loop().run_in_executor(None, ex.shutdown, True)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ---------------------------------------------------------------------------- stream side
    def open(self, key: K) -> None:
        """Register a stream (a key may be reused once its previous stream ended)."""
        if not self._accepting:
            raise BatcherClosed("the batcher is not running")
        if key in self._streams:
            raise ValueError(f"stream {key!r} is already open in the batcher")
        self._streams[key] = _Stream(space=asyncio.Event())

    def pending(self, key: K) -> int:
        """Chunks of ``key`` queued or being decoded."""
        s = self._streams.get(key)
        return 0 if s is None else s.pending

    async def put(self, key: K, chunk: Any, *, final: bool = False, arrival: Optional[float] = None
                  ) -> asyncio.Future:
        """Queue a chunk of stream ``key``; waits while the stream has ``max_pending`` chunks pending.

        Returns a future of the chunk's :class:`ChunkOutcome`. ``arrival`` (a
        ``time.perf_counter()`` value, default now) is when the chunk reached the server; the
        chunk's queue time counts from it. After a ``final`` chunk the stream is closed here.
        """
        s = self._stream(key)
        if arrival is None:
            arrival = time.perf_counter()
        while s.pending >= self.max_pending:
            assert s.space is not None
            s.space.clear()
            await s.space.wait()
            s = self._stream(key)  # the stream may have been cancelled meanwhile
        return self._enqueue(key, s, chunk, final, arrival)

    def finish(self, key: K, empty_chunk: Any, *, arrival: Optional[float] = None) -> asyncio.Future:
        """End stream ``key``: mark its last queued chunk final, or queue ``empty_chunk`` as final.

        Never waits (the end of a stream does not add decoding work beyond the bound). Returns
        the future of the chunk that carries the final flag.
        """
        s = self._stream(key)
        if s.queue:
            item = s.queue[-1]
            item.final = True
            s.finished = True
            self._wake()
            return item.future
        return self._enqueue(key, s, empty_chunk, True, time.perf_counter() if arrival is None else arrival)

    def cancel(self, key: K) -> None:
        """Forget stream ``key``: its queued chunks' futures are cancelled (a running batch finishes)."""
        if key in self._streams:
            self._drop_queued(key, None)
            s = self._streams.pop(key)
            if s.space is not None:
                s.space.set()

    async def call(self, fn: Callable, *args: Any) -> Any:
        """Run ``fn(*args)`` on the worker thread, between batches (e.g. opening a decoder stream)."""
        if self._executor is None:
            raise BatcherClosed("the batcher is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -------------------------------------------------------------------------------- internal
    def _stream(self, key: Any) -> _Stream:
        if not self._accepting:
            raise BatcherClosed("the batcher is stopping")
        s = self._streams.get(key)
        if s is None:
            raise KeyError(f"stream {key!r} is not open in the batcher")
        if s.failed is not None:
            raise s.failed
        if s.finished:
            raise ValueError(f"stream {key!r} already has its final chunk")
        return s

    def _enqueue(self, key: Any, s: _Stream, chunk: Any, final: bool, arrival: float) -> asyncio.Future:
        assert self._loop is not None
        fut = self._loop.create_future()
        s.queue.append(_Item(chunk, bool(final), float(arrival), fut))
        s.pending += 1
        if final:
            s.finished = True
        self._wake()
        return fut

    def _drop_queued(self, key: Any, exc: Optional[BaseException], retrieved: bool = False) -> None:
        """Cancel (``exc=None``) or fail the queued chunks of ``key``; ``retrieved``: do not log
        their errors as never retrieved (the stream's first failed chunk reports it)."""
        s = self._streams.get(key)
        if s is None:
            return
        while s.queue:
            item = s.queue.popleft()
            s.pending -= 1
            if not item.future.done():
                if exc is None:
                    item.future.cancel()
                else:
                    item.future.set_exception(exc)
                    if retrieved:
                        item.future.exception()
        if s.space is not None:
            s.space.set()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _ready(self) -> list:
        keys = [k for k, s in self._streams.items() if s.queue and not s.in_batch]
        keys.sort(key=lambda k: self._streams[k].queue[0].arrival)
        return keys

    async def _wait_change(self, timeout: Optional[float]) -> None:
        assert self._changed is not None
        self._changed.clear()
        if timeout is None:
            await self._changed.wait()
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _run(self) -> None:
        while True:
            ready = self._ready()
            if not ready:
                if self._stopping:
                    return
                await self._wait_change(None)
                continue
            if len(ready) < self.max_batch and not self._stopping:
                oldest = self._streams[ready[0]].queue[0].arrival
                left = oldest + self.max_wait - time.perf_counter()
                if left > 0:
                    await self._wait_change(left)
                    continue
            await self._run_batch(ready[: self.max_batch])

    async def _run_batch(self, keys: list) -> None:
        items: dict[Any, _Item] = {}
        streams: dict[Any, _Stream] = {}
        for k in keys:
            s = streams[k] = self._streams[k]
            items[k] = s.queue.popleft()
            s.in_batch = True
        chunks = {k: it.chunk for k, it in items.items()}
        final = {k for k, it in items.items() if it.final}
        index = self.batches
        self.batches += 1
        self.chunks += len(keys)

        def work() -> tuple[dict, dict, float, float]:
            t0 = time.perf_counter()
            out, errs = isolate_failures(self.step, chunks, final)
            return out, errs, t0, time.perf_counter()

        assert self._executor is not None
        errors: dict = {}
        try:
            results, errors, t0, t1 = await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except Exception as err:  # the worker itself failed: every chunk of this batch gets the error
            errors, results, t0 = {k: err for k in keys}, {}, time.perf_counter()
            t1 = t0
        if errors:
            self.failed_batches += 1
            self.failed_chunks += len(errors)
        compute_ms = 1000.0 * (t1 - t0)
        queue_ms = [1000.0 * max(0.0, t0 - items[k].arrival) for k in keys]
        if self.keep_history:
            self.history.append(BatchRecord(index, list(keys), set(final), t0, compute_ms, queue_ms))
        for k, q in zip(keys, queue_ms):
            it, s = items[k], streams[k]
            s.in_batch = False
            s.pending -= 1
            if it.final and self._streams.get(k) is s:
                del self._streams[k]
            if s.space is not None:
                s.space.set()
            if k in errors and self._streams.get(k) is s:  # the stream failed: its queued chunks fail with it
                s.failed = errors[k]
                self._drop_queued(k, errors[k], retrieved=True)
            if it.future.done():
                continue
            if k in errors:
                it.future.set_exception(errors[k])
            else:
                it.future.set_result(ChunkOutcome(results.get(k), q, compute_ms, len(keys), index))
