"""The streaming recognition server: Starlette WebSockets on uvicorn, one dynamic batcher.

:class:`StreamingService` owns a decoder (anything with ``open(id, boosts)``, ``step(chunks,
final)`` and ``close(id)``: :class:`asrdecode.streaming.StreamDecoder`), a
:class:`~asrdecode.serving.batcher.DynamicBatcher` that calls its ``step`` on one worker
thread, and the open WebSocket sessions. :func:`create_app` makes the ASGI application;
:class:`Server` is a ``uvicorn.Server`` whose shutdown first *drains*: it stops accepting
connections, lets the open streams finish for up to ``drain_timeout_s`` seconds, then ends the
streams still open with a ``final`` message (``"reason": "shutdown"``) for the audio received
so far, finishes the batches in flight and closes the sockets. :class:`ServerThread` runs one
in a background thread (tests, the load generator's ``--spawn`` alternative).

The wire protocol is in :mod:`asrdecode.serving.protocol`. Routes: ``/v1/stream``
(WebSocket), ``/health`` (JSON: status, open streams, batch counters), the browser page
(:mod:`asrdecode.serving.web`: ``/``, ``/static/...``, ``/v1/info``) and, when the service has a
``transcriber`` (:func:`build_service` gives it one), ``POST /v1/audio/transcriptions``
(:mod:`asrdecode.serving.transcriptions`: whole files decoded offline, in OpenAI's audio API shape).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Mapping, Optional

import numpy as np

from ..errors import DecodingInputError
from ..streaming.defaults import bundle_decoding, resolve_decoding
from ..streaming.latency import LatencyError, latency_in_force
from .batcher import BatcherClosed, DynamicBatcher
from .settings import ServerConfig
from .protocol import (CLOSE_CODES, SAMPLE_RATE, AudioRateMeter, ProtocolError, StreamConfig, decode_chunk,
                       error_message, parse_config, parse_control, result_message)

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    from .connections import ConnectionStats, guarded_http_protocol
except ImportError as _err:  # pragma: no cover - exercised by the CLI's missing-extra message
    raise ImportError("the asrdecode server needs Starlette, uvicorn and websockets: "
                      "pip install -e '.[serve]' in the asrdecode checkout") from _err

__all__ = ["ServerConfig", "StreamingService", "create_app", "Server", "ServerThread", "build_service", "latency_in_force"]

log = logging.getLogger("asrdecode.serving")
STREAM_PATH = "/v1/stream"


class _Disconnected(Exception):
    """The client went away."""


@dataclass
class _Entry:
    seq: int
    future: asyncio.Future
    samples: int               # samples of the stream up to the end of this chunk
    final: bool = False


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable


def stream_latency(decoder: Any, sid: Hashable) -> Optional[dict[str, Any]]:
    """The latency in force of an open stream (``StreamDecoder.stream_latency``), ``None`` for a decoder
    that does not report one."""
    report = getattr(decoder, "stream_latency", None)
    return report(sid) if callable(report) else None


def _decoding_failure(err: BaseException) -> tuple[str, str]:
    """The protocol error of a chunk whose decoding failed (its stream only; see batcher isolation)."""
    if isinstance(err, DecodingInputError):
        return "bad_audio", f"the decoder refused the audio: {err}"
    return "internal", f"decoding failed: {type(err).__name__}: {err}"


class _Session:
    """One WebSocket stream: a reader (socket -> batcher) and a sender (results -> socket)."""

    def __init__(self, service: "StreamingService", ws: WebSocket, sid: int) -> None:
        self.service = service
        self.ws = ws
        self.sid = sid
        self.config: Optional[StreamConfig] = None
        self.samples = 0
        self.seq = 0
        self.received = 0          # audio messages read from the socket
        self.sent = 0              # results sent
        self.opened = False        # open in the decoder (and batcher)
        self.finished = False      # the final chunk was queued
        self.forced = False        # ended by the server's shutdown
        self.outq: asyncio.Queue[_Entry] = asyncio.Queue(maxsize=service.config.max_pending)
        self._last_entry: Optional[_Entry] = None
        self.reader: Optional[asyncio.Task] = None
        self.sender: Optional[asyncio.Task] = None
        self._receiving: Optional[asyncio.Future] = None  # the socket read in progress (kept across waits)
        self.done = asyncio.Event()

    # ---------------------------------------------------------------------------------- entry
    async def run(self) -> None:
        try:
            await self._run()
        finally:
            # also when this handler is cancelled (uvicorn gave up on the connection): nothing of
            # the stream may stay behind in the batcher or the decoder
            for t in (self.reader, self.sender, self._receiving):
                if t is not None and not t.done():
                    t.cancel()
            svc = self.service
            svc.batcher.cancel(self.sid)
            if self.opened and svc.batcher.running:
                self.opened = False
                asyncio.ensure_future(_quietly(svc.batcher.call(svc.close_stream, self.sid)))
            self.done.set()

    async def _run(self) -> None:
        try:
            await self._configure()
        except ProtocolError as perr:
            await self._fail(perr.code, perr.message)
            return
        except _Disconnected:
            await self._cleanup()
            return
        except BatcherClosed:
            await self._fail("shutting_down", "the server is shutting down")
            return
        reader = self.reader = asyncio.create_task(self._read_loop())
        sender = self.sender = asyncio.create_task(self._send_loop())
        await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            if reader.cancelled():
                if not self.forced:
                    await self._cleanup()
                    return
                if not self.finished:  # shutdown: end the stream with the audio received so far
                    try:
                        await self._finish()
                    except (BatcherClosed, KeyError, ValueError):
                        await self._fail("shutting_down", "the server is shutting down")
                        return
            elif reader.exception() is not None:
                err = reader.exception()
                sender.cancel()
                if isinstance(err, ProtocolError):
                    await self._fail(err.code, err.message)
                elif isinstance(err, _Disconnected):
                    await self._cleanup()
                elif isinstance(err, BatcherClosed):
                    await self._fail("shutting_down", "the server is shutting down")
                elif isinstance(err, DecodingInputError):  # an earlier chunk of this stream failed
                    await self._fail(*_decoding_failure(err))
                else:
                    log.error("stream %s: reading failed: %r", self.sid, err)
                    await self._fail("internal", f"{type(err).__name__}: {err}")
                return
            await asyncio.wait({sender})  # the reader queued the end: the sender sends the final
        if not reader.done():
            reader.cancel()
        if sender.cancelled():
            await self._cleanup()
            return
        err = sender.exception()
        if err is None:
            await self._cleanup()
            await self._close(CLOSE_CODES["shutting_down"] if self.forced else 1000, "")
            self.service.completed += 1
        elif isinstance(err, _Disconnected):
            await self._cleanup()
        else:
            code, message = _decoding_failure(err)
            if code == "internal":
                log.error("stream %s: decoding failed: %r", self.sid, err)
            await self._fail(code, message)

    def force_final(self) -> None:
        """Shutdown: stop reading and end the stream with the audio received so far."""
        self.forced = True
        if self.reader is not None and not self.reader.done():
            self.reader.cancel()

    # ------------------------------------------------------------------------------- protocol
    async def _receive(self, timeout: float, meter: Optional[AudioRateMeter] = None) -> dict:
        """The client's next message; ``idle_timeout`` after ``timeout`` s without one, and while
        waiting, ``meter`` is credited with the waiting time and checked (``too_slow``) every
        tenth of its window."""
        if self._receiving is None:
            self._receiving = asyncio.ensure_future(self.ws.receive())
        task = self._receiving
        loop = asyncio.get_running_loop()
        start = last = loop.time()
        while not task.done():
            left = start + timeout - last
            if left <= 0:
                raise ProtocolError("idle_timeout", f"no message from the client for {timeout:g} s")
            tick = left if meter is None else min(left, max(0.01, meter.window / 10))
            await asyncio.wait({task}, timeout=tick)
            now = loop.time()
            if meter is not None:
                meter.waited(now - last)
                if not task.done():
                    meter.check()
            last = now
        self._receiving = None
        try:
            msg = task.result()
        except Exception as err:  # starlette raises on a receive after a disconnect
            raise _Disconnected(str(err)) from None
        if msg["type"] == "websocket.disconnect":
            raise _Disconnected(f"code {msg.get('code')}")
        return msg

    async def _configure(self) -> None:
        svc = self.service
        limits = svc.config.limits
        msg = await self._receive(limits.config_timeout_s)
        if msg.get("text") is None:
            raise ProtocolError("unexpected_binary", "the first message must be the JSON configuration, got binary data")
        self.config = parse_config(msg["text"], limits)
        latency = {} if self.config.latency is None else {"latency": self.config.latency}
        try:
            await svc.batcher.call(functools.partial(svc.decoder.open, **latency), self.sid, self.config.boosts)
        except LatencyError as err:
            raise ProtocolError("bad_latency", f"configuration: {err}") from None
        except (ValueError, TypeError) as err:
            raise ProtocolError("bad_boosts" if self.config.boosts else "bad_config", str(err)) from None
        self.opened = True
        svc.batcher.open(self.sid)
        ready: dict[str, Any] = {"type": "ready", "stream_id": self.sid, "sample_rate": SAMPLE_RATE,
                                 "encoding": self.config.encoding,
                                 "max_chunk_bytes": limits.max_chunk_bytes(self.config.encoding),
                                 "frame_seconds": svc.frame_seconds}
        in_force = stream_latency(svc.decoder, self.sid)
        if in_force is not None:
            ready["latency"] = in_force
        if self.config.name is not None:
            ready["name"] = self.config.name
        await self._send_text(json.dumps(ready))

    async def _read_loop(self) -> None:
        svc = self.service
        limits = svc.config.limits
        assert self.config is not None
        max_samples = int(limits.max_stream_seconds * SAMPLE_RATE)
        meter = AudioRateMeter(limits)
        while True:
            msg = await self._receive(limits.idle_timeout_s, meter)
            arrival = time.perf_counter()
            if msg.get("bytes") is not None:
                self.received += 1
                svc.max_backlog = max(svc.max_backlog, self.received - self.sent)
                chunk = decode_chunk(msg["bytes"], self.config.encoding, limits)
                if self.samples + chunk.size > max_samples:
                    raise ProtocolError("stream_too_long", f"the stream is longer than {limits.max_stream_seconds:g} s")
                self.samples += chunk.size
                meter.received(chunk.size)
                meter.check()  # a flood of tiny messages never leaves the server waiting long
                fut = await svc.batcher.put(self.sid, chunk, arrival=arrival)
                entry = _Entry(self.seq, fut, self.samples)
                await self.outq.put(entry)
                self._last_entry = entry
                self.seq += 1
            else:
                parse_control(msg.get("text") or "", limits)
                await self._finish(arrival)
                return

    async def _finish(self, arrival: Optional[float] = None) -> None:
        svc = self.service
        self.finished = True
        last = self._last_entry
        fut = svc.batcher.finish(self.sid, np.zeros(0, dtype=np.float32), arrival=arrival)
        if last is not None and last.future is fut:
            last.final = True
        else:
            await self.outq.put(_Entry(self.seq, fut, self.samples, final=True))
            self.seq += 1

    async def _send_loop(self) -> None:
        svc = self.service
        while True:
            entry = await self.outq.get()
            outcome = await entry.future
            res = outcome.result
            final = entry.final or bool(getattr(res, "final", False))
            fields: dict[str, Any] = {"stream_id": self.sid, "seq": entry.seq,
                                      "text": (getattr(res, "text", None) or "") if res is not None else "",
                                      "frames": int(getattr(res, "frames", 0) or 0),
                                      "audio_seconds": round(entry.samples / SAMPLE_RATE, 4),
                                      "queue_ms": round(outcome.queue_ms, 3), "compute_ms": round(outcome.compute_ms, 3),
                                      "batch": outcome.batch_size}
            if final:
                self.opened = False  # the decoder closed the stream with its final result
                words = svc.words(getattr(res, "hypothesis", None))
                if words is not None:
                    fields["words"] = words
                if self.forced:
                    fields["reason"] = "shutdown"
            svc.chunks_done += 1
            await self._send_text(result_message("final" if final else "partial", fields))
            self.sent += 1
            if final:
                return

    # -------------------------------------------------------------------------------- helpers
    async def _send_text(self, text: str) -> None:
        try:
            await self.ws.send_text(text)
        except Exception as err:  # the client is gone
            raise _Disconnected(str(err)) from None

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason=reason[:120])

    async def _cleanup(self) -> None:
        """Forget the stream in the batcher and the decoder (nothing of it is decoded any more)."""
        svc = self.service
        for t in (self.reader, self.sender, self._receiving):
            if t is not None and not t.done():
                t.cancel()
        svc.batcher.cancel(self.sid)
        if self.opened:
            self.opened = False
            with contextlib.suppress(Exception):
                await svc.batcher.call(svc.close_stream, self.sid)

    async def _fail(self, code: str, message: str) -> None:
        svc = self.service
        svc.errors[code] = svc.errors.get(code, 0) + 1
        await self._cleanup()
        with contextlib.suppress(Exception):
            await self.ws.send_text(error_message(code, message, stream_id=self.sid))
        await self._close(CLOSE_CODES[code], message)


class StreamingService:
    """Decoder + batcher + sessions; :meth:`handle` serves one WebSocket.

    Args:
        decoder: object with ``open(id, boosts)``, ``step(chunks, final) -> {id: result}`` and
            ``close(id)`` (a :class:`~asrdecode.streaming.StreamDecoder`); results have
            ``text``, ``final``, ``frames`` and ``hypothesis``.
        config: :class:`ServerConfig` (its model/decoder fields are informational here).
        tokenizer, frame_seconds: for word times in ``final`` messages.
        step: the batched call (default ``decoder.step`` under ``torch.inference_mode``).
    """

    def __init__(self, decoder: Any, config: ServerConfig, *, tokenizer: Any = None, frame_seconds: float = 0.08,
                 step: Optional[Callable] = None, keep_history: bool = False) -> None:
        self.decoder = decoder
        self.config = config
        self.tokenizer = tokenizer
        self.frame_seconds = float(frame_seconds)
        self._step = step if step is not None else _inference_step(decoder)
        self._keep_history = keep_history
        self.batcher: DynamicBatcher = DynamicBatcher(self._step, max_batch=config.max_batch,
                                                      max_wait_ms=config.max_wait_ms,
                                                      max_pending=config.max_pending, keep_history=keep_history)
        self.sessions: dict[int, _Session] = {}
        self.draining = False
        self.completed = 0
        self.chunks_done = 0
        self.errors: dict[str, int] = {}
        # most audio messages of one stream read from its socket and not yet answered: at most
        # max_pending (queued) + 1 (being sent) + 1 (being read) while back-pressure works
        self.max_backlog = 0
        self._ids = itertools.count(1)
        self.started = False
        self.connections = ConnectionStats()  # refused over max_connections, closed for a slow handshake
        self.transcriber: Any = None  # POST /v1/audio/transcriptions (serving.transcriptions.Transcriber), if set

    async def startup(self) -> None:
        if not self.batcher.running:
            if self.batcher.batches or self.started:  # restarted (a second server over one service)
                self.batcher = DynamicBatcher(self._step, max_batch=self.config.max_batch,
                                              max_wait_ms=self.config.max_wait_ms,
                                              max_pending=self.config.max_pending,
                                              keep_history=self._keep_history)
            await self.batcher.start()
            if self.config.warmup_seconds > 0 and not self.started:
                await self.batcher.call(self._warmup)
        self.started = True
        self.draining = False

    def _warmup(self) -> None:
        sid = ("warmup", id(self))
        self.decoder.open(sid, None)
        try:
            self._step({sid: np.zeros(int(self.config.warmup_seconds * SAMPLE_RATE), np.float32)}, {sid})
        finally:
            self.close_stream(sid)

    async def drain(self, timeout: Optional[float] = None) -> None:
        """Refuse new streams; wait up to ``timeout`` s for open ones, then end them; stop the batcher."""
        self.draining = True
        timeout = self.config.drain_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while self.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for s in list(self.sessions.values()):
            s.force_final()
        end = time.monotonic() + 10.0
        while self.sessions and time.monotonic() < end:
            await asyncio.sleep(0.02)
        await self.batcher.stop(drain=True)

    def close_stream(self, sid: Hashable) -> None:
        """Close ``sid`` in the decoder if it is open there (runs on the worker thread)."""
        try:
            self.decoder.close(sid)
        except (KeyError, ValueError):
            pass

    def words(self, hyp: Any) -> Optional[list[dict[str, Any]]]:
        if hyp is None:
            return None
        from ..records import hypothesis_record

        rec = hypothesis_record(hyp, self.tokenizer, self.frame_seconds, "")
        return rec.get("words")

    def health(self) -> dict[str, Any]:
        from .web import model_name

        return {"status": "draining" if self.draining else "ok", "model": model_name(self.config.model),
                "decoder": self.config.decoder, "streams": len(self.sessions), "completed": self.completed,
                "batches": self.batcher.batches, "chunks": self.batcher.chunks,
                "mean_batch": round(self.batcher.chunks / max(1, self.batcher.batches), 3),
                "max_batch": self.config.max_batch, "max_wait_ms": self.config.max_wait_ms,
                "max_backlog": self.max_backlog, "errors": dict(self.errors),
                "failed_batches": self.batcher.failed_batches, "failed_chunks": self.batcher.failed_chunks,
                "refused_connections": self.connections.refused,
                "handshake_timeouts": self.connections.head_timeouts}

    async def handle(self, ws: WebSocket) -> None:
        await ws.accept()
        if self.draining or not self.batcher.running:
            await ws.send_text(error_message("shutting_down", "the server is shutting down"))
            await ws.close(CLOSE_CODES["shutting_down"])
            return
        if len(self.sessions) >= self.config.max_streams:
            self.errors["server_busy"] = self.errors.get("server_busy", 0) + 1
            await ws.send_text(error_message("server_busy", f"{self.config.max_streams} streams are open"))
            await ws.close(CLOSE_CODES["server_busy"])
            return
        sid = next(self._ids)
        session = _Session(self, ws, sid)
        self.sessions[sid] = session
        try:
            await session.run()
        finally:
            self.sessions.pop(sid, None)


def _inference_step(decoder: Any) -> Callable:
    import torch

    def step(chunks: dict, final: set) -> Mapping:
        with torch.inference_mode():
            return decoder.step({k: torch.from_numpy(v) for k, v in chunks.items()}, final=final)

    return step


def create_app(service: StreamingService, bind_host: str = "127.0.0.1") -> Any:
    """The ASGI app: ``/v1/stream`` (WebSocket, same-origin browsers only), ``/health``, the browser
    page (``/``, ``/static``) and ``/v1/info``; the lifespan starts the batcher. Requests whose ``Host``
    is not the server's (loopback, ``bind_host``, ``config.allowed_hosts``) are refused
    (:class:`~asrdecode.serving.web.HostGuard`)."""

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(service.health())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await service.startup()
        try:
            yield
        finally:
            if service.batcher.running:  # Server.shutdown drained already; a bare uvicorn did not
                await service.drain(0.0)
            if service.transcriber is not None:
                await asyncio.get_running_loop().run_in_executor(None, service.transcriber.close)

    from .transcriptions import transcription_routes  # POST /v1/audio/transcriptions (offline, OpenAI's shape)
    from .web import HostGuard, page_routes, same_origin_only  # the browser page (serving/static), /v1/info

    offline = transcription_routes(service) if service.transcriber is not None else []
    app = Starlette(routes=[WebSocketRoute(STREAM_PATH, same_origin_only(service.handle)), Route("/health", health),
                            *page_routes(service, STREAM_PATH), *offline],
                    lifespan=lifespan)
    return HostGuard(app, bind_host, frozenset(service.config.allowed_hosts))


def build_service(config: ServerConfig, transcriptions: Optional[Any] = None, **kwargs: Any) -> StreamingService:
    """Load the model (:func:`~asrdecode.models.load_bundle`), make its :class:`~asrdecode.streaming.StreamDecoder`
    (:func:`bundle_decoding`: the model's own decoding defaults unless told otherwise), wrap it; its
    ``transcriber`` decodes whole files for ``POST /v1/audio/transcriptions`` with the same options
    resolved as ``transcribe`` resolves them (``transcriptions``: a
    :class:`~asrdecode.serving.transcriptions.TranscriptionConfig`)."""
    from ..models import load_bundle
    from ..streaming import StreamDecoder

    from .transcriptions import Transcriber, TranscriptionConfig

    bundle = load_bundle(config.model)
    offline, _ = resolve_decoding(bundle, config.decoder, config.decoder_options)
    decoder, options = bundle_decoding(bundle, config.decoder, config.decoder_options)
    config = replace(config, decoder=decoder)
    service = StreamingService(StreamDecoder(bundle, decoder=decoder, **options), config, tokenizer=bundle.tokenizer,
                               frame_seconds=bundle.frame_seconds, **kwargs)
    service.transcriber = Transcriber(bundle, offline, config.model, transcriptions or TranscriptionConfig())
    return service


class Server(uvicorn.Server):
    """``uvicorn.Server`` that drains the service before uvicorn closes the connections.

    The first SIGINT/SIGTERM starts the drain (no new connections, open streams finish within
    ``drain_timeout_s``); a second SIGINT forces the exit. ``on_ready()`` is called once the
    service has started (warmed up) and the socket accepts connections.
    """

    def __init__(self, service: StreamingService, host: str = "127.0.0.1", port: int = 8000,
                 log_level: str = "warning", on_ready: Optional[Callable[[], None]] = None,
                 **uvicorn_kwargs: Any) -> None:
        self.service = service
        self.on_ready = on_ready
        assert service.config.max_connections is not None  # set by ServerConfig.__post_init__
        http = guarded_http_protocol(service.config.max_connections, service.config.handshake_timeout_s,
                                     service.connections, service.config.max_connections_per_client)
        cfg = uvicorn.Config(create_app(service, host), host=host, port=port, log_level=log_level, http=http,
                             ws="websockets-sansio", ws_max_size=service.config.limits.transport_max_bytes,
                             ws_ping_interval=None, lifespan="on", **uvicorn_kwargs)
        super().__init__(cfg)

    async def startup(self, sockets: Optional[list[socket.socket]] = None) -> None:
        await super().startup(sockets)  # the lifespan (batcher start, warm-up) runs first
        if self.started and self.on_ready is not None:
            self.on_ready()

    async def shutdown(self, sockets: Optional[list[socket.socket]] = None) -> None:
        for server in getattr(self, "servers", []):
            server.close()  # stop accepting
        drain = asyncio.create_task(self.service.drain())
        while not drain.done():
            if self.force_exit:
                drain.cancel()
                break
            await asyncio.sleep(0.05)
        with contextlib.suppress(asyncio.CancelledError):
            await drain
        await super().shutdown(sockets)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (``port=0``: a free port; read it with ``getsockname()``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ServerThread:
    """Run a :class:`Server` in a background thread (its own event loop); a context manager.

    ``url`` is the stream endpoint (``ws://host:port/v1/stream``). :meth:`stop` drains as a
    signal would.
    """

    def __init__(self, service: StreamingService, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = Server(service, host=self.host, port=self.port)
        self._thread = threading.Thread(target=self._main, name="asrdecode-server", daemon=True)
        self.error: Optional[BaseException] = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{STREAM_PATH}"

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.port}/health"

    def _main(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as err:  # noqa: BLE001 - reported by start()/stop()
            self.error = err

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self._thread.start()
        end = time.monotonic() + timeout
        while not self.server.started:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start: {self.error!r}")
            if time.monotonic() > end:
                raise TimeoutError("the server did not start in time")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(5.0)
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
        service: Optional[StreamingService] = None) -> None:
    """Serve until SIGINT/SIGTERM (``asrdecode serve``)."""
    service = service or build_service(config)
    server = Server(service, host=host, port=port, log_level=log_level)
    server.run()

