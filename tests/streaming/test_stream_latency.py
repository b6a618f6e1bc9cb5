"""Stream latency settings: latency -> block / left / right per model, per stream; the start message's
``latency`` field; phone-ctc streams at the default latency close to whole-file decoding."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sentencepiece")

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.evaluate import wer  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.streaming import BlockContext, LatencyError, StreamDecoder, latency_policy  # noqa: E402
from asrdecode.streaming.latency import POLICIES, LatencyPolicy, check_latency  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "real"


class _Named:
    def __init__(self, name: str, frame_seconds: float) -> None:
        self.name, self.frame_seconds = name, frame_seconds


def test_latency_maps_to_each_models_context():
    phone = latency_policy(_Named("phone-ctc", 0.02))
    assert latency_policy(_Named("phone-ctc:words=300", 0.02)) is phone
    assert phone.context(0.1) == BlockContext(3, 50, 2)      # 5 frames of 20 ms: block 3, lookahead 2
    assert phone.context(0.4) == BlockContext(10, 50, 10)
    assert phone.context(2.0) == BlockContext(25, 50, 75)    # the block stays 0.5 s, the rest is lookahead
    assert phone.context() == phone.context(phone.default_latency)
    assert phone.context().latency_frames() * 0.02 == pytest.approx(phone.default_latency)
    defaults = {"demo-ctc": BlockContext(16, 16, 9), "demo-rnnt": BlockContext(16, 16, 4),  # 2.0 s, 1.6 s (old)
                "demo-tdt": BlockContext(12, 16, 3)}                                            # 1.2 s
    for name, default in defaults.items():
        demo = latency_policy(_Named(name, 0.08))
        assert demo.context() == default
        assert demo.context(1.6) == BlockContext(16, 16, 4)   # the old fixed front end
        assert demo.context(0.1) == BlockContext(1, 16, 0)    # one 80 ms frame at least
        assert demo.context(0.8) == BlockContext(8, 16, 2)
    # another model: the old front end on its own frame length; a bundled name with another frame too
    other = latency_policy(_Named("my-model", 0.04))
    assert other.context() == BlockContext(16, 16, 4) and other.default_latency == pytest.approx(0.8)
    assert latency_policy(_Named("phone-ctc", 0.08)) is not POLICIES["phone-ctc"]
    info = phone.info(1.2)
    assert info["frames"] == {"block": 25, "left": 50, "right": 35}
    assert (info["latency"], info["block"], info["left"], info["right"]) == pytest.approx((1.2, 0.5, 1.0, 0.7))


@pytest.mark.parametrize("bad", ["1.0", True, None, [1], float("nan"), float("inf"), 0, -1.0, 0.001, 10.5])
def test_bad_latency_is_a_named_error(bad):
    with pytest.raises(LatencyError, match="latency"):
        check_latency("latency", bad)
    with pytest.raises(LatencyError):
        LatencyPolicy(0.02, 1.0, 0.5, 16, 50).context(bad if bad is not None else "x")


@pytest.fixture(scope="module")
def ctc():
    return load("demo-ctc")


def test_streams_have_their_own_latency(ctc):
    wave = read_audio(DATA / "cards-001.wav")[:24000]
    dec = StreamDecoder(ctc, "greedy")
    assert (dec.front.block_frames, dec.front.left_context, dec.front.right_context) == (16, 16, 9)
    dec.open("fast", latency=0.4)
    dec.open("default")
    assert dec.stream_latency("fast")["frames"] == {"block": 4, "left": 16, "right": 1}
    assert dec.stream_latency("default")["latency"] == pytest.approx(2.0)
    # explicit frames: the rest is the old fixed front end's
    assert StreamDecoder(ctc, "greedy", block_frames=8).latency_info()["frames"] == {"block": 8, "left": 16, "right": 4}
    partial = {"fast": [], "default": []}
    for a in range(0, wave.numel(), 2560):
        last = a + 2560 >= wave.numel()
        out = dec.step({s: wave[a:a + 2560] for s in partial}, final=set(partial) if last else ())
        for s in partial:
            partial[s].append(out[s].frames)
    assert out["fast"].hypothesis.tokens == dec.offline(wave, latency=0.4).tokens
    assert out["default"].hypothesis.tokens == dec.offline(wave).tokens
    # the short-latency stream gets its frames (partial results) sooner
    assert partial["fast"][4] > partial["default"][4] == 0
    with pytest.raises(LatencyError):
        dec.open("x", latency=20)
    with pytest.raises(LatencyError, match="not both"):
        StreamDecoder(ctc, "greedy", latency=1.0, block_frames=8)
    assert StreamDecoder(ctc, "greedy", latency=0.8).latency_info()["frames"] == {"block": 8, "left": 16, "right": 2}


def test_protocol_latency_field():
    from asrdecode.serving.protocol import CLOSE_CODES, Limits, ProtocolError, StreamConfig, parse_config

    lim = Limits()
    c = parse_config(json.dumps({"sample_rate": 16000, "latency": 1.2}), lim)
    assert c.latency == pytest.approx(1.2) and parse_config(c.to_json(), lim) == c
    assert parse_config('{"sample_rate": 16000}', lim).latency is None
    assert parse_config('{"sample_rate": 16000, "latency": 2}', lim).latency == 2.0
    for bad in ('"1.2"', "true", "[1]", "{}", "NaN", "Infinity", "0", "-0.5", "0.001", "11", "1e9"):
        with pytest.raises(ProtocolError) as info:
            parse_config('{"sample_rate": 16000, "latency": %s}' % bad, lim)
        assert info.value.code == "bad_latency" and "latency" in info.value.message, bad
    assert CLOSE_CODES["bad_latency"] == 1008
    assert StreamConfig(latency=0.5).to_json() == '{"sample_rate": 16000, "encoding": "s16le", "latency": 0.5}'


def test_server_stream_latency_and_its_errors(ctc):
    pytest.importorskip("starlette")
    pytest.importorskip("websockets")
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from asrdecode.serving.loadtest import Clip, loadtest
    from asrdecode.serving.protocol import encode_chunk
    from asrdecode.serving.server import ServerConfig, ServerThread, StreamingService, latency_in_force

    dec = StreamDecoder(ctc, "greedy")
    svc = StreamingService(dec, ServerConfig(model="demo-ctc", decoder="greedy", warmup_seconds=0),
                           tokenizer=ctc.tokenizer, frame_seconds=ctc.frame_seconds)
    assert latency_in_force(dec)["latency"] == pytest.approx(2.0)
    wave = read_audio(DATA / "cards-003.wav")[:20000].numpy()

    async def session(url: str, config: dict) -> list[dict]:
        got = []
        async with connect(url, max_size=None, ping_interval=None) as ws:
            await ws.send(json.dumps({"sample_rate": 16000, **config}))
            got.append(json.loads(await ws.recv()))
            if got[0]["type"] == "ready":
                for a in range(0, wave.size, 2560):
                    await ws.send(encode_chunk(wave[a:a + 2560]))
                await ws.send('{"type": "end"}')
            try:
                async for msg in ws:
                    got.append(json.loads(msg))
            except ConnectionClosed:  # an error closes with its own code
                pass
        return got

    with ServerThread(svc) as st:
        ok = asyncio.run(session(st.url, {"latency": 0.4}))
        bad = asyncio.run(session(st.url, {"latency": "fast"}))
        load = loadtest(st.url, [Clip("c", wave)], 1, latency=0.4, realtime=False, chunk_seconds=0.16)
    assert ok[0]["latency"]["frames"] == {"block": 4, "left": 16, "right": 1}
    partials = [m for m in ok if m["type"] == "partial"]
    assert len(partials) >= len(range(0, wave.size, 2560)) - 1 and partials[4]["frames"] > 0  # partials still arrive
    quantized = torch.from_numpy(np.round(wave * 32768).clip(-32768, 32767).astype(np.float32) / 32768)
    assert ok[-1]["type"] == "final" and ok[-1]["text"] == (dec.offline(quantized, latency=0.4).text or "")
    assert bad[0]["type"] == "error" and bad[0]["code"] == "bad_latency"
    assert [r.final_text for r in load.results] == [ok[-1]["text"]]  # loadtest --latency: the same stream


def _has_hama() -> bool:
    try:
        from asrdecode.models.phone_lexicon import require_hama

        require_hama()
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _has_hama(), reason="hama (the phone-ctc model) is not installed")
def test_phone_ctc_default_latency_is_close_to_whole_file():
    """Phones (greedy CTC, no graph: seconds) of two real clips streamed at the default latency differ
    from whole-file decoding in under 10 % of the phones; the old fixed front end (0.08 s lookahead)
    differs in over 20 %."""
    from asrdecode.models import load_bundle

    bundle = load_bundle("phone-ctc")
    waves = [read_audio(DATA / "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"),
             read_audio(DATA / "cards-003.wav")]

    def phones(dec: StreamDecoder) -> list[str]:
        return [" ".join(map(str, dec.offline(w).tokens)) for w in waves]

    whole = phones(StreamDecoder(bundle, "greedy", block_frames=10**7, left_context=0, right_context=0))
    now = phones(StreamDecoder(bundle, "greedy"))
    old = phones(StreamDecoder(bundle, "greedy", block_frames=16, left_context=16, right_context=4))
    assert wer(whole, now, normalize=False) < 0.10
    assert wer(whole, old, normalize=False) > 0.20


def test_serve_latency_flag_sets_the_streams_default():
    pytest.importorskip("starlette")
    from asrdecode import cli
    from asrdecode.serving import server

    args = cli.build_parser().parse_args(["serve", "--model", "demo-ctc", "--latency", "0.8"])
    svc = server.build_service(cli._server_config(args, server))
    assert server.latency_in_force(svc.decoder)["frames"] == {"block": 8, "left": 16, "right": 2}
    assert "latency 0.8 s (block 0.64 s, left 1.28 s, right 0.16 s)" in cli._latency_words(svc)
    bad = cli.build_parser().parse_args(["serve", "--model", "demo-ctc", "--latency", "-1"])
    with pytest.raises(LatencyError, match="--latency"):
        cli._server_config(bad, server)
