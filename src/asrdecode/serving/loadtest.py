"""The load generator behind ``asrdecode loadtest``: N concurrent real-time streams on loopback.

Each of ``streams`` clients opens a WebSocket to the server, sends its configuration, then a
clip's audio in chunks of ``chunk_seconds`` at real-time pace (chunk ``k`` is sent when its
audio would have been recorded, ``start + (k + 1) * chunk_seconds``; clients start at random
offsets within one chunk so that arrivals are not synchronised), then ``{"type": "end"}``, and
reads the ``partial`` / ``final`` messages. With ``duration`` each client keeps streaming clip
after clip (a new stream each) until that many seconds have passed, then ends its current stream
after the chunk in flight (so every client stops at about the same time).

Measured, as in table 4 of the GPU WFST paper (milliseconds):

- **compute**: the ``step`` time of the batch that decoded a chunk (server-side);
- **queue**: the chunk's arrival at the server -> the start of its batch (server-side);
- **total**: queue + compute, per chunk (the paper's "total latency");
- **response**: chunk sent -> its partial (or final) received, per chunk (client-side: adds the
  socket, back-pressure and message handling);
- **final**: ``end`` sent -> final transcript received (client-side);
- **RTFx**: audio seconds of the finished streams / wall seconds of the run. A server that keeps
  up reaches about ``streams`` (each stream delivers one second of audio per second).

``send lag`` is how late the client managed to send chunks versus the real-time schedule (the
client or the socket could not keep up: back-pressure or an overloaded machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from .protocol import SAMPLE_RATE, encode_chunk

__all__ = ["Clip", "StreamReport", "LoadTestReport", "load_clips", "run_load", "loadtest", "spawn_server",
           "percentile"]


@dataclass
class Clip:
    name: str
    audio: np.ndarray  # float32, 16 kHz, mono

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass
class StreamReport:
    """One stream as the client saw it."""

    client: int
    clip: str
    audio_seconds: float        # audio sent (the whole clip unless the run's duration cut it)
    chunks: int = 0
    final_text: Optional[str] = None
    error: Optional[dict[str, Any]] = None
    close_code: Optional[int] = None
    queue_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    batch: list[int] = field(default_factory=list)
    response_ms: list[float] = field(default_factory=list)
    final_ms: Optional[float] = None
    max_send_lag_ms: float = 0.0
    partial_texts: list[str] = field(default_factory=list)
    words: Optional[list[dict[str, Any]]] = None
    stream_seconds: Optional[float] = None  # first chunk sent -> final received

    @property
    def real_time_factor(self) -> Optional[float]:
        """Stream wall time over its audio (first chunk sent -> final received, over the audio sent):
        about 1 plus the final latency when the server keeps up with real-time audio, growing when it
        falls behind; ``None`` for a stream without a final or without audio."""
        if self.stream_seconds is None or self.audio_seconds <= 0:
            return None
        return self.stream_seconds / self.audio_seconds

    @property
    def ok(self) -> bool:
        return self.error is None and self.final_text is not None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation), NaN for no values."""
    if not len(values):
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@dataclass
class LoadTestReport:
    streams: int
    chunk_seconds: float
    wall_seconds: float
    results: list[StreamReport]
    realtime: bool = True  # chunks were paced at real time

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.results if r.ok]
        cat = lambda name: [v for r in ok for v in getattr(r, name)]  # noqa: E731
        queue, compute, response = cat("queue_ms"), cat("compute_ms"), cat("response_ms")
        total = [q + c for r in ok for q, c in zip(r.queue_ms, r.compute_ms)]
        finals = [r.final_ms for r in ok if r.final_ms is not None]
        batches = cat("batch")
        audio = sum(r.audio_seconds for r in ok)
        out: dict[str, Any] = {
            "streams": self.streams, "chunk_seconds": self.chunk_seconds, "finished": len(ok),
            "failed": len(self.results) - len(ok), "audio_seconds": round(audio, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "rtfx": round(audio / self.wall_seconds, 2) if self.wall_seconds > 0 else float("nan"),
            "mean_batch": round(float(np.mean(batches)), 2) if batches else float("nan"),
            "max_send_lag_ms": round(max([r.max_send_lag_ms for r in self.results] or [0.0]), 1),
        }
        for name, vals in (("compute_ms", compute), ("queue_ms", queue), ("total_ms", total),
                           ("response_ms", response), ("final_ms", finals)):
            out[name] = {"mean": round(float(np.mean(vals)), 2) if vals else float("nan"),
                         "p99": round(percentile(vals, 99), 2)}
        errors: dict[str, int] = {}
        for r in self.results:
            if r.error is not None:
                code = str(r.error.get("code", "?"))
                errors[code] = errors.get(code, 0) + 1
        out["errors"] = errors
        rtfs = [f for f in (r.real_time_factor for r in ok) if f is not None]
        out["stream_rtf"] = {"mean": round(float(np.mean(rtfs)), 3) if rtfs else float("nan"),
                             "max": round(max(rtfs), 3) if rtfs else float("nan")}
        out["verdict"] = self.verdict(out)
        return out

    def verdict(self, s: Mapping[str, Any]) -> str:
        """One line: did the server keep up with ``streams`` real-time streams? It kept up when every
        stream finished and a chunk's result came back before the next chunk was due (response p99 at
        most the chunk length); the per-stream real-time factor (stream wall time / its audio) says by
        how much a stream ran late."""
        chunk_ms = 1000.0 * self.chunk_seconds
        rtf = s["stream_rtf"]
        rtf_text = f"per-stream real-time factor mean {rtf['mean']:.2f}, max {rtf['max']:.2f}"
        if s["failed"]:
            codes = ", ".join(f"{code} x{n}" for code, n in s["errors"].items()) or "no final"
            return f"FAILED: {s['failed']} of {s['failed'] + s['finished']} streams did not finish ({codes})"
        if not self.realtime:
            return f"NOT REAL TIME: audio was sent as fast as possible (RTFx {s['rtfx']:.1f}); no keep-up verdict"
        if s["max_send_lag_ms"] > chunk_ms:
            return (f"INCONCLUSIVE: the load generator itself fell {s['max_send_lag_ms']:.0f} ms behind real "
                    f"time (more than a {chunk_ms:.0f} ms chunk): it is starved of CPU; run fewer streams "
                    f"or the client on another machine")
        p99 = s["response_ms"]["p99"]
        if p99 <= chunk_ms:
            return (f"KEPT UP: {s['streams']} streams, each chunk's result came back before the next was due "
                    f"(response p99 {p99:.0f} ms <= chunk {chunk_ms:.0f} ms); {rtf_text}")
        return (f"OVERLOADED: results fall behind the audio (response p99 {p99:.0f} ms > chunk "
                f"{chunk_ms:.0f} ms, queue p99 {s['queue_ms']['p99']:.0f} ms); {rtf_text}: run fewer streams, "
                f"a larger --max-batch or a faster decoder")

    def format_text(self) -> str:
        s = self.summary()
        lines = [f"streams           {s['streams']} concurrent, chunks of {s['chunk_seconds']:g} s",
                 f"finished streams  {s['finished']} ({s['failed']} failed{', ' + str(s['errors']) if s['errors'] else ''})",
                 f"audio / wall      {s['audio_seconds']:.1f} s / {s['wall_seconds']:.1f} s",
                 f"RTFx              {s['rtfx']:.1f}",
                 f"mean batch        {s['mean_batch']}",
                 f"max send lag      {s['max_send_lag_ms']:.0f} ms",
                 "latency (ms)         mean       p99"]
        for name, label in (("compute_ms", "compute"), ("queue_ms", "queue"), ("total_ms", "total (q + c)"),
                            ("response_ms", "response"), ("final_ms", "final")):
            lines.append(f"  {label:<16}{s[name]['mean']:>9.1f} {s[name]['p99']:>9.1f}")
        first = next((r.error for r in self.results if r.error is not None), None)
        if first is not None:
            lines.append(f"first error       {first.get('code')}: {first.get('message')}")
        lines.append(f"stream RTF        mean {s['stream_rtf']['mean']:.2f}, max {s['stream_rtf']['max']:.2f}")
        lines.append(f"verdict           {s['verdict']}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(),
                "streams": [{k: v for k, v in asdict(r).items() if k not in ("partial_texts",)} for r in self.results]}


def load_clips(paths: Sequence[str | os.PathLike]) -> list[Clip]:
    """Clips from wav files, folders of wav files and NeMo manifests (``.json``/``.jsonl``)."""
    from ..audio import read_audio
    from ..errors import FileFormatError

    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.wav")))
        elif p.suffix in (".json", ".jsonl"):
            from ..evaluate import read_manifest

            files.extend(Path(e.audio_filepath) for e in read_manifest(p))
        elif p.is_file():
            files.append(p)
        else:
            raise FileFormatError(p, None, "no such audio file, folder or manifest")
    if not files:
        raise FileFormatError(", ".join(map(str, paths)), None, "no audio files found")
    return [Clip(f.name, read_audio(f).numpy().astype(np.float32)) for f in files]


async def _one_stream(url: str, clip: Clip, client: int, chunk_seconds: float, encoding: str,
                      boosts: Optional[Mapping[str, float]], realtime: bool, start_at: float,
                      open_timeout: float, stop_at: Optional[float] = None,
                      latency: Optional[float] = None) -> StreamReport:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    rep = StreamReport(client, clip.name, clip.seconds)
    step = max(1, int(round(chunk_seconds * SAMPLE_RATE)))
    chunks = [clip.audio[i:i + step] for i in range(0, len(clip.audio), step)]
    sent_at: dict[int, float] = {}  # chunk seq -> when it was sent
    end_sent: list[float] = []  # when "end" was sent (once)
    cfg: dict[str, Any] = {"sample_rate": SAMPLE_RATE, "encoding": encoding, "name": f"{client}:{clip.name}"}
    if boosts:
        cfg["boosts"] = dict(boosts)
    if latency is not None:
        cfg["latency"] = float(latency)
    try:
        async with connect(url, max_size=None, compression=None, open_timeout=open_timeout,
                           ping_interval=None, close_timeout=5) as ws:
            await ws.send(json.dumps(cfg))
            first = json.loads(await ws.recv())
            if first.get("type") != "ready":
                rep.error = first
                return rep
            receiver = asyncio.create_task(_receive_results(ws, rep, sent_at, end_sent))
            try:
                await _send_audio(ws, rep, chunks, receiver, sent_at, end_sent, chunk_seconds=chunk_seconds,
                                  encoding=encoding, realtime=realtime, start_at=start_at, stop_at=stop_at)
                await receiver
            except ConnectionClosed:
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await asyncio.wait_for(receiver, 5)
            finally:
                if not receiver.done():
                    receiver.cancel()
                rep.close_code = ws.close_code
    except ConnectionClosed as err:
        rep.close_code = err.rcvd.code if err.rcvd is not None else None
    except (OSError, asyncio.TimeoutError) as err:
        rep.error = {"type": "error", "code": "connect", "message": f"{type(err).__name__}: {err}"}
    if rep.final_text is None and rep.error is None:
        rep.error = {"type": "error", "code": "closed", "message": f"closed without a final (code {rep.close_code})"}
    return rep


async def _receive_results(ws: Any, rep: StreamReport, sent_at: dict[int, float], end_sent: list[float]) -> None:
    """Record the server's partials and final into ``rep`` (timings against ``sent_at`` / ``end_sent``),
    until the final or an error message."""
    async for raw in ws:
        now = time.perf_counter()
        msg = json.loads(raw)
        kind = msg.get("type")
        if kind == "error":
            rep.error = msg
            return
        if kind not in ("partial", "final"):
            continue
        rep.queue_ms.append(float(msg["queue_ms"]))
        rep.compute_ms.append(float(msg["compute_ms"]))
        rep.batch.append(int(msg["batch"]))
        seq = int(msg["seq"])
        if seq in sent_at:
            rep.response_ms.append(1000.0 * (now - sent_at[seq]))
        if kind == "partial":
            rep.partial_texts.append(msg.get("text", ""))
        else:
            rep.final_text = msg.get("text", "")
            rep.words = msg.get("words")
            if end_sent:
                rep.final_ms = 1000.0 * (now - end_sent[0])
            if 0 in sent_at:
                rep.stream_seconds = now - sent_at[0]
            return


async def _send_audio(ws: Any, rep: StreamReport, chunks: Sequence[Any], receiver: asyncio.Task,
                      sent_at: dict[int, float], end_sent: list[float], *, chunk_seconds: float, encoding: str,
                      realtime: bool, start_at: float, stop_at: Optional[float]) -> None:
    """From ``start_at``: send the chunks (at real-time pace when ``realtime``), then "end"; stop early
    when the server ended the stream or at ``stop_at``. Records send times and counts in ``rep``."""
    sent_samples = 0
    now = time.perf_counter()
    if start_at > now:
        await asyncio.sleep(start_at - now)
    t0 = time.perf_counter()
    for k, chunk in enumerate(chunks):
        if realtime:
            target = t0 + (k + 1) * chunk_seconds
            wait = target - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            else:
                rep.max_send_lag_ms = max(rep.max_send_lag_ms, -1000.0 * wait)
        if receiver.done():
            break  # the server ended the stream (an error)
        if stop_at is not None and k > 0 and time.perf_counter() >= stop_at:
            break  # the run's time is up: end the stream here
        data = encode_chunk(chunk, encoding)
        sent_at[k] = time.perf_counter()
        await ws.send(data)
        rep.chunks += 1
        sent_samples += len(chunk)
    rep.audio_seconds = sent_samples / SAMPLE_RATE
    if not receiver.done():
        end_sent.append(time.perf_counter())
        await ws.send(json.dumps({"type": "end"}))


async def run_load(url: str, clips: Sequence[Clip], streams: int, *, chunk_seconds: float = 0.5,
                   duration: Optional[float] = None, encoding: str = "s16le",
                   boosts: Optional[Mapping[str, float]] = None, realtime: bool = True, stagger: bool = True,
                   seed: int = 0, open_timeout: float = 30.0, latency: Optional[float] = None) -> LoadTestReport:
    """Run ``streams`` concurrent clients against ``url`` (see the module docs); ``latency``: every
    stream's latency in its start message (``None``: the server's)."""
    if streams < 1:
        raise ValueError(f"streams must be >= 1, got {streams}")
    if not (chunk_seconds > 0 and math.isfinite(chunk_seconds)):
        raise ValueError(f"chunk_seconds must be > 0, got {chunk_seconds}")
    if not clips:
        raise ValueError("no clips")
    rng = random.Random(seed)
    t_start = time.perf_counter() + 0.05
    offsets = [rng.uniform(0.0, chunk_seconds) if stagger else 0.0 for _ in range(streams)]
    deadline = None if duration is None else t_start + duration

    async def client(i: int) -> list[StreamReport]:
        out = []
        k = i
        start_at = t_start + offsets[i]
        while True:
            rep = await _one_stream(url, clips[k % len(clips)], i, chunk_seconds, encoding, boosts, realtime,
                                    start_at, open_timeout, deadline, latency=latency)
            out.append(rep)
            k += streams
            start_at = 0.0
            if deadline is None or time.perf_counter() >= deadline or not rep.ok:
                return out

    per_client = await asyncio.gather(*(client(i) for i in range(streams)))
    wall = time.perf_counter() - t_start
    results = [r for rs in per_client for r in rs]
    return LoadTestReport(streams, chunk_seconds, wall, results, realtime=realtime)


def loadtest(url: str, clips: Sequence[Clip], streams: int, **kwargs: Any) -> LoadTestReport:
    """Synchronous :func:`run_load`."""
    return asyncio.run(run_load(url, clips, streams, **kwargs))


@contextlib.contextmanager
def spawn_server(serve_args: Sequence[str], *, timeout: float = 120.0, env: Optional[Mapping[str, str]] = None,
                 command: Optional[Sequence[str]] = None) -> Iterator[str]:
    """Start ``asrdecode serve --port 0 SERVE_ARGS`` in a subprocess; yields its stream URL.

    ``command`` replaces ``asrdecode serve --host 127.0.0.1 --port 0`` (a program that prints
    ``listening on URL ...`` once it serves). On exit the server gets SIGTERM (a graceful drain)
    and, if it has not ended after 60 s, SIGKILL.
    """
    base = list(command) if command is not None else [sys.executable, "-m", "asrdecode.cli", "serve", "--host",
                                                       "127.0.0.1", "--port", "0"]
    cmd = [*base, *serve_args]
    proc_env = dict(os.environ if env is None else env)
    proc_env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=proc_env)
    try:
        url = None
        end = time.monotonic() + timeout
        assert proc.stdout is not None
        while url is None:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"`{' '.join(cmd)}` exited with status {proc.wait()} before listening")
            if line.startswith("listening on "):
                url = line.split()[2]
            if time.monotonic() > end:
                raise TimeoutError("the server did not start in time")
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
