"""Server hardening (issue 15): one hostile client never hurts the other streams, and no client can
hold the server's slots. All on 127.0.0.1, with short limits configured for the test and bounded
loops."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from asrdecode import cli  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.serving.loadtest import Clip, load_clips  # noqa: E402
from asrdecode.serving.protocol import (MAX_ABS_SAMPLE_CEILING, AudioRateMeter, Limits, ProtocolError,  # noqa: E402
                                        decode_chunk, encode_chunk)
from asrdecode.serving.server import ServerConfig, ServerThread  # noqa: E402
from asrdecode.streaming import MAX_ABS_SAMPLE, StreamInputError  # noqa: E402
from test_server import CLIPS, cfg, make_service, raw_session  # noqa: E402

pytestmark = pytest.mark.timeout(120)

MARK = np.float32(0.0123456)  # first sample of a poisoned stream's chunks (f32le carries it exactly)


@pytest.fixture(scope="module")
def clips() -> list[Clip]:
    """test_server's real clips, loaded once for this module."""
    return load_clips(CLIPS)


async def stream_clip(url: str, audio: np.ndarray, chunk: int, *, encoding: str = "f32le", pace: float = 0.0,
                      read_timeout: float = 30.0) -> tuple[list[dict], int | None]:
    """One client: configuration, ``audio`` in chunks (``pace`` s apart), end; every reply and the close code."""
    got: list[dict] = []
    async with connect(url, max_size=None, ping_interval=None, close_timeout=5) as ws:
        await ws.send(cfg(encoding=encoding))
        got.append(json.loads(await asyncio.wait_for(ws.recv(), read_timeout)))

        async def send():
            try:
                for i in range(0, len(audio), chunk):
                    await ws.send(encode_chunk(audio[i:i + chunk], encoding))
                    if pace:
                        await asyncio.sleep(pace)
                await ws.send(json.dumps({"type": "end"}))
            except ConnectionClosed:
                pass

        sender = asyncio.create_task(send())
        try:
            while True:
                got.append(json.loads(await asyncio.wait_for(ws.recv(), read_timeout)))
        except ConnectionClosed:
            pass
        await sender
        return got, ws.close_code


# -- isolation -------------------------------------------------------------------------------------


def test_huge_float_samples_close_only_that_stream(clips):
    """The issue's reproduction: five good f32le streams and one of 1e30 samples, batched together."""
    svc = make_service(max_batch=8, max_wait_ms=150)
    bad = np.full(16000, 1e30, np.float32)
    with ServerThread(svc) as st:
        async def main():
            good = [stream_clip(st.url, clips[i % len(clips)].audio, 4000) for i in range(5)]
            return await asyncio.gather(stream_clip(st.url, bad, 4000), *good)

        (bad_msgs, bad_code), *goods = asyncio.run(main())
    assert bad_code == 1007 and bad_msgs[-1]["type"] == "error" and bad_msgs[-1]["code"] == "bad_chunk"
    assert "magnitude" in bad_msgs[-1]["message"]
    for i, (msgs, code) in enumerate(goods):
        assert code == 1000 and msgs[-1]["type"] == "final", msgs[-1]
        assert msgs[-1]["text"] == _exact_offline(svc, clips[i % len(clips)].audio)  # f32le: the exact samples
    assert svc.health()["errors"] == {"bad_chunk": 1}


def _exact_offline(svc, audio: np.ndarray) -> str:
    import torch

    with torch.inference_mode():
        return svc.decoder.offline(torch.from_numpy(audio.astype(np.float32))).text or ""


@pytest.mark.parametrize("named", [True, False])
def test_a_stream_failing_inside_a_batched_step_closes_alone(clips, named):
    """A failure inside the decoder step (injected): named by the decoder -> ``bad_audio`` (1007) for
    that stream; not named -> each stream is stepped alone and only the culprit gets ``internal``."""
    import torch

    svc = make_service(max_batch=5, max_wait_ms=500)  # the five streams' first chunks share a batch
    dec = svc.decoder

    def step(chunks, final):
        poisoned = [k for k, c in chunks.items() if c.size and c[0] == MARK]
        if poisoned:
            if named:
                raise StreamInputError({k: DecodingInputError(f"stream {k}: injected") for k in poisoned})
            raise RuntimeError("injected failure, culprit unknown")
        with torch.inference_mode():
            return dec.step({k: torch.from_numpy(c) for k, c in chunks.items()}, final=final)

    svc._step = step
    svc.batcher.step = step
    poison = clips[0].audio.astype(np.float32).copy()
    poison[::4000] = MARK
    with ServerThread(svc) as st:
        async def main():
            good = [stream_clip(st.url, clips[i % len(clips)].audio, 4000) for i in range(4)]
            return await asyncio.gather(stream_clip(st.url, poison, 4000), *good)

        (bad_msgs, bad_code), *goods = asyncio.run(main())
        health = svc.health()
    code = "bad_audio" if named else "internal"
    assert bad_msgs[-1]["type"] == "error" and bad_msgs[-1]["code"] == code, bad_msgs[-1]
    assert bad_code == (1007 if named else 1011)
    bad_sid = bad_msgs[-1]["stream_id"]
    for i, (msgs, code_) in enumerate(goods):
        assert code_ == 1000 and msgs[-1]["type"] == "final"
        assert msgs[-1]["text"] == _exact_offline(svc, clips[i % len(clips)].audio)
    # the poisoned stream shared a batch with others, and that batch's other streams went on
    shared = [b for b in svc.batcher.history if bad_sid in b.keys and len(b.keys) > 1]
    assert shared and health["failed_batches"] >= 1 and health["failed_chunks"] == 1
    assert health["errors"] == {code: 1} and len(dec) == 0


# -- data rate ---------------------------------------------------------------------------------------


def test_slow_drip_stream_is_closed_and_real_time_streams_are_not(clips):
    limits = Limits(max_chunk_seconds=1.0, idle_timeout_s=20, min_audio_rate=0.5, rate_window_s=1.0,
                    rate_grace_s=1.0)
    svc = make_service(max_batch=4, max_wait_ms=10, step_delay=0.05, limits=limits)
    audio = clips[1].audio
    with ServerThread(svc) as st:
        async def drip():
            t0 = time.monotonic()
            got, code = await raw_session(st.url, [cfg()] + [b"\x00\x00", 0.3] * 30, read_timeout=10)
            return got, code, time.monotonic() - t0

        async def flood():  # as fast as it can: back-pressure, never "too slow"
            return await stream_clip(st.url, np.tile(audio, 3), 16000, encoding="s16le")

        async def main():
            return await asyncio.gather(drip(), stream_clip(st.url, audio, 1600, pace=0.1, encoding="s16le"),
                                        flood())

        (drip_msgs, drip_code, drip_s), (rt_msgs, rt_code), (fl_msgs, fl_code) = asyncio.run(main())
    assert drip_msgs[-1]["type"] == "error" and drip_msgs[-1]["code"] == "too_slow", drip_msgs[-1]
    assert drip_code == 1008 and drip_s < 6.0  # closed after the 1 s grace + a window, not after 30 drips
    assert rt_code == 1000 and rt_msgs[-1]["type"] == "final"  # a real-time client (~1.1 s of audio)
    assert fl_code == 1000 and fl_msgs[-1]["type"] == "final"


def test_audio_rate_meter_counts_waiting_time_only():
    lim = Limits(min_audio_rate=0.5, rate_window_s=2.0, rate_grace_s=3.0)
    m = AudioRateMeter(lim)
    m.waited(2.5)
    m.check()  # within the grace period: no verdict
    m.received(16000)  # 1 s of audio
    m.waited(0.4)
    m.check()  # 1 s in the last 2 s of waiting
    assert m.rate() == pytest.approx(0.5)
    m.waited(1.7)  # the chunk (at 2.5 s of waiting) left the window [2.6, 4.6]
    with pytest.raises(ProtocolError) as info:
        m.check()
    assert info.value.code == "too_slow" and info.value.close_code == 1008
    m.received(8000)
    m.received(8000)
    assert m.rate() == pytest.approx(0.5)
    m.check()
    off = AudioRateMeter(Limits(min_audio_rate=0))
    off.waited(1e6)
    off.check()  # 0 turns the check off


# -- connections -------------------------------------------------------------------------------------


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the server closes ``sock`` within ``seconds`` (reads and drops anything it sends)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


def test_connections_that_never_finish_the_handshake_are_closed(clips):
    svc = make_service(handshake_timeout_s=0.5)
    with ServerThread(svc) as st:
        idle = socket.create_connection((st.host, st.port), timeout=5)   # sends nothing
        drip = socket.create_connection((st.host, st.port), timeout=5)   # headers byte by byte
        drip.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        t0 = time.monotonic()
        closed_drip = False
        for b in b"Upgrade: websocket\r\nConnection: Upgrade\r\n":
            try:
                drip.sendall(bytes([b]))
            except OSError:
                closed_drip = True
                break
            time.sleep(0.05)
            if time.monotonic() - t0 > 3.0:
                break
        closed_drip = closed_drip or _closed_within(drip, 3.0)
        closed_idle = _closed_within(idle, 3.0)
        # a keep-alive HTTP connection: its first request is answered, an unfinished second one times out
        http = socket.create_connection((st.host, st.port), timeout=5)
        http.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = http.recv(65536)
        http.sendall(b"GET /health HTTP/1.1\r\n")
        closed_http = _closed_within(http, 3.0)
        # a WebSocket stream may take longer than the handshake deadline: the deadline ends at the upgrade
        msgs, code = asyncio.run(raw_session(st.url, [0.8, cfg(), encode_chunk(clips[0].audio[:8000]), 0.8,
                                                      json.dumps({"type": "end"})]))
        health = svc.health()
        for s in (idle, drip, http):
            s.close()
    assert closed_idle and closed_drip and closed_http
    assert first.startswith(b"HTTP/1.1 200")
    assert code == 1000 and msgs[-1]["type"] == "final"
    assert health["handshake_timeouts"] >= 3


def test_connection_cap_refuses_with_503_and_frees_slots(clips):
    svc = make_service(max_streams=2, max_connections=3, handshake_timeout_s=30)
    with ServerThread(svc) as st:
        held = [socket.create_connection((st.host, st.port), timeout=5) for _ in range(3)]
        time.sleep(0.2)
        extra = socket.create_connection((st.host, st.port), timeout=5)
        extra.settimeout(5)
        reply = extra.recv(4096)
        refused_ws = None
        try:
            asyncio.run(raw_session(st.url, [cfg()]))
        except InvalidStatus as err:
            refused_ws = err.response.status_code
        for s in held + [extra]:
            s.close()
        deadline = time.monotonic() + 10
        msgs, code = [], None
        while time.monotonic() < deadline:  # the held slots are freed once the server saw them close
            try:
                msgs, code = asyncio.run(raw_session(st.url, [cfg(), encode_chunk(clips[0].audio[:8000]),
                                                              json.dumps({"type": "end"})]))
                break
            except InvalidStatus:
                time.sleep(0.1)
        health = svc.health()
    assert reply.startswith(b"HTTP/1.1 503") and b"too many open connections" in reply
    assert refused_ws == 503
    assert code == 1000 and msgs[-1]["type"] == "final"
    assert health["refused_connections"] >= 2


# -- limits and their ceilings -----------------------------------------------------------------------


def test_limit_ceilings_and_server_config_checks():
    with pytest.raises(ValueError, match="max_chunk_seconds must be at most 30"):
        Limits(max_chunk_seconds=31)
    Limits(max_chunk_seconds=30)
    with pytest.raises(ValueError, match="max_text_bytes must be at most"):
        Limits(max_text_bytes=2 ** 21)
    with pytest.raises(ValueError, match="max_abs_sample must be at most"):
        Limits(max_abs_sample=2000.0)
    for bad in (-1, float("nan"), True):
        with pytest.raises(ValueError, match="min_audio_rate"):
            Limits(min_audio_rate=bad)
    for name in ("rate_window_s", "rate_grace_s", "max_abs_sample"):
        with pytest.raises(ValueError, match=name):
            Limits(**{name: 0})
    with pytest.raises(ValueError, match="max_connections"):
        ServerConfig(max_streams=4, max_connections=3)
    with pytest.raises(ValueError, match="handshake_timeout_s"):
        ServerConfig(handshake_timeout_s=float("inf"))
    assert ServerConfig(max_streams=10).max_connections == 20
    assert MAX_ABS_SAMPLE_CEILING == MAX_ABS_SAMPLE  # the protocol's copy of the decoder's bound


def test_cli_refuses_a_chunk_ceiling_breach(capsys):
    assert cli.main(["serve", "--max-chunk-seconds", "100"]) == 2
    assert "max_chunk_seconds must be at most 30" in capsys.readouterr().err
    assert cli.main(["serve", "--max-streams", "8", "--max-connections", "4"]) == 2
    assert "max_connections" in capsys.readouterr().err
    assert cli.main(["serve", "--min-audio-rate", "nan"]) == 2


def test_f32_sample_range_at_ingest():
    lim = Limits()
    ok = decode_chunk(np.array([1.0, -1.0, 2.0, -2.0], "<f4").tobytes(), "f32le", lim)
    assert ok.tolist() == [1.0, -1.0, 2.0, -2.0]
    for bad in ([2.001], [1e30], [-3e38], [0.0, np.nan], [np.inf]):
        with pytest.raises(ProtocolError) as info:
            decode_chunk(np.array(bad, "<f4").tobytes(), "f32le", lim)
        assert info.value.code == "bad_chunk" and info.value.close_code == 1007
    assert decode_chunk(b"", "f32le", lim).size == 0
    wide = Limits(max_abs_sample=1000.0)
    assert decode_chunk(np.array([999.0], "<f4").tobytes(), "f32le", wide).tolist() == [999.0]
