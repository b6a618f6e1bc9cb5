"""The streaming server on loopback: finals equal offline decoding, bad messages, back-pressure,
graceful shutdown, per-stream boosts, the CLI. Each test is bounded in streams and time."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from asrdecode.serving.loadtest import Clip, load_clips, run_load  # noqa: E402
from asrdecode.serving.protocol import Limits, decode_chunk, encode_chunk  # noqa: E402
from asrdecode.serving.server import ServerConfig, ServerThread, StreamingService  # noqa: E402

pytestmark = pytest.mark.timeout(90)

CLIPS = ["data/real/cards-001.wav", "data/real/cards-003.wav", "data/real/cards-004.wav"]


def make_service(model: str = "demo-rnnt", decoder: str = "greedy", options: dict | None = None, *,
                 step_delay: float = 0.0, **cfg) -> StreamingService:
    from asrdecode.models import load
    from asrdecode.streaming import StreamDecoder

    bundle = load(model)
    dec = StreamDecoder(bundle, decoder=decoder, **(options or {}))
    cfg.setdefault("limits", Limits(max_chunk_seconds=1.0, config_timeout_s=10, idle_timeout_s=20))
    config = ServerConfig(model=model, decoder=decoder, **cfg)
    step = None
    if step_delay:  # a slower machine: the real step, then a pause
        import torch

        def step(chunks, final):
            with torch.inference_mode():
                out = dec.step(chunks, final=final)
            time.sleep(step_delay)
            return out

    return StreamingService(dec, config, tokenizer=bundle.tokenizer, frame_seconds=bundle.frame_seconds,
                            keep_history=True, step=step)


def quantized(audio: np.ndarray) -> np.ndarray:
    """What the server decodes from s16le messages."""
    return decode_chunk(encode_chunk(audio, "s16le"), "s16le", Limits())


def offline_text(service: StreamingService, audio: np.ndarray, boosts=None) -> str:
    import torch

    with torch.inference_mode():
        hyp = service.decoder.offline(torch.from_numpy(quantized(audio)), boosts=boosts)
    return hyp.text or ""


@pytest.fixture(scope="module")
def clips() -> list[Clip]:
    return load_clips(CLIPS)


async def raw_session(url: str, messages: list, *, read_timeout: float = 20.0) -> tuple[list[dict], int | None]:
    """Send ``messages`` (str: text, bytes: binary; a float: sleep), then read until the server closes."""
    got: list[dict] = []
    async with connect(url, max_size=None, ping_interval=None, close_timeout=5) as ws:
        try:
            for m in messages:
                if isinstance(m, float):
                    await asyncio.sleep(m)
                else:
                    await ws.send(m)
        except ConnectionClosed:
            pass
        try:
            while True:
                got.append(json.loads(await asyncio.wait_for(ws.recv(), read_timeout)))
        except ConnectionClosed:
            pass
        return got, ws.close_code


def cfg(**kw) -> str:
    return json.dumps({"sample_rate": 16000, **kw})


def test_loadtest_finals_equal_offline(clips):
    svc = make_service(max_batch=8, max_wait_ms=100)
    with ServerThread(svc) as st:
        rep = asyncio.run(run_load(st.url, clips, 4, chunk_seconds=0.25, stagger=False))
        health = svc.health()
    assert [r.ok for r in rep.results] == [True] * 4, [r.error for r in rep.results]
    for r in rep.results:
        clip = clips[r.client % len(clips)]
        assert r.final_text == offline_text(svc, clip.audio), r.clip
        n_chunks = -(-len(clip.audio) // 4000)
        assert r.chunks == n_chunks
        # one partial per chunk, then the final (on the last chunk or an empty end chunk)
        assert len(r.partial_texts) + 1 in (n_chunks, n_chunks + 1)
        assert all(q >= 0 for q in r.queue_ms) and all(c > 0 for c in r.compute_ms)
        assert r.final_ms is not None and r.final_ms > 0
    assert any(r.final_text for r in rep.results)
    s = rep.summary()
    assert s["finished"] == 4 and s["failed"] == 0 and s["rtfx"] > 0
    assert health["completed"] == 4 and health["streams"] == 0
    assert max(len(b.keys) for b in svc.batcher.history) > 1  # streams shared decoder steps
    assert all(len(set(b.keys)) == len(b.keys) <= 8 for b in svc.batcher.history)


def test_bad_messages_close_only_that_stream(clips):
    svc = make_service(max_batch=4, max_wait_ms=20)
    clip = clips[1]
    limit = svc.config.limits.max_chunk_bytes("s16le")
    audio = encode_chunk(clip.audio[:4000])
    bad_cases = {
        "not json": (["{sample_rate: 16000"], "bad_config", 1008),
        "json list": (["[1, 2]"], "bad_config", 1008),
        "wrong rate": ([json.dumps({"sample_rate": 8000})], "bad_sample_rate", 1003),
        "unknown key": ([cfg(rate=1)], "bad_config", 1008),
        "binary first": ([audio], "unexpected_binary", 1008),
        "oversized": ([cfg(), audio, b"\0" * (limit + 2)], "chunk_too_large", 1009),
        "odd bytes": ([cfg(), audio, b"\1\2\3"], "bad_chunk", 1007),
        "nan float": ([cfg(encoding="f32le"), np.array([0.1, np.nan], "<f4").tobytes()], "bad_chunk", 1007),
        "bad control": ([cfg(), audio, json.dumps({"type": "stop"})], "bad_message", 1008),
        "bad boost": ([cfg(boosts={"cards": "high"})], "bad_boosts", 1008),
        "bad encoding": ([cfg(encoding="mp3")], "bad_encoding", 1003),
    }

    async def main(url):
        good = asyncio.create_task(run_load(url, [clip], 1, chunk_seconds=0.25, stagger=False))
        await asyncio.sleep(0.3)  # the good stream is under way
        bad = await asyncio.gather(*(raw_session(url, m) for m, _, _ in bad_cases.values()))
        # a message far over the WebSocket layer's own cap: cut off there, still only this stream
        huge = await raw_session(url, [cfg(), b"\0" * (svc.config.limits.transport_max_bytes + 8)])
        return await good, bad, huge

    with ServerThread(svc) as st:
        good, bad, huge = asyncio.run(main(st.url))
        health = svc.health()
    for (name, (_, code, close)), (msgs, close_code) in zip(bad_cases.items(), bad):
        errors = [m for m in msgs if m["type"] == "error"]
        assert len(errors) == 1 and errors[0]["code"] == code, (name, msgs)
        assert msgs[-1]["type"] == "error", name  # nothing after the error
        assert close_code == close, (name, close_code)
    assert huge[1] == 1009
    r = good.results[0]
    assert r.ok and r.final_text == offline_text(svc, clip.audio)
    assert health["streams"] == 0 and health["completed"] == 1
    assert sum(health["errors"].values()) == len(bad_cases)


def test_back_pressure_bounds_unanswered_chunks(clips):
    max_pending = 2
    svc = make_service(max_batch=4, max_wait_ms=0, max_pending=max_pending, step_delay=0.01)
    clip = clips[2]
    chunks = [encode_chunk(clip.audio[i:i + 160]) for i in range(0, len(clip.audio), 160)]  # 10 ms chunks

    async def blast(url):
        sent = 0
        got = []
        async with connect(url, max_size=None, ping_interval=None) as ws:
            await ws.send(cfg())
            got.append(json.loads(await ws.recv()))
            for c in chunks:  # as fast as the socket takes them
                await ws.send(c)
                sent += 1
            await ws.send(json.dumps({"type": "end"}))
            async for raw in ws:
                got.append(json.loads(raw))
        return sent, got

    with ServerThread(svc) as st:
        sent, got = asyncio.run(blast(st.url))
        health = svc.health()
    assert sent == len(chunks) > 50
    assert got[-1]["type"] == "final" and got[-1]["text"] == offline_text(svc, clip.audio)
    assert [m["seq"] for m in got[1:]] == list(range(len(got) - 1))
    # the queue filled up (the client sent faster than the server decoded), and the server
    # stopped reading the socket: never more than max_pending + 2 chunks read and unanswered
    assert max_pending <= health["max_backlog"] <= max_pending + 2


def test_graceful_shutdown_finishes_in_flight_streams(clips):
    svc = make_service(max_batch=4, max_wait_ms=20, drain_timeout_s=30)
    st = ServerThread(svc).start()
    stopper: list[threading.Thread] = []

    async def main():
        load = asyncio.create_task(run_load(st.url, clips[:2], 2, chunk_seconds=0.25, stagger=False))
        await asyncio.sleep(0.5)  # both streams are mid-way
        t = threading.Thread(target=st.stop)
        t.start()
        stopper.append(t)
        await asyncio.sleep(0.3)
        try:  # no new streams while draining
            late = await raw_session(st.url, [cfg()], read_timeout=5)
        except OSError:
            late = None
        return await load, late

    try:
        rep, late = asyncio.run(main())
    finally:
        for t in stopper:
            t.join(60)
        st.stop()
    for r in rep.results:
        assert r.ok, r.error
        assert r.final_text == offline_text(svc, clips[r.client].audio)
    assert late is None or late[0][-1]["code"] == "shutting_down"
    assert not svc.batcher.running


def test_shutdown_ends_streams_after_the_drain_timeout(clips):
    svc = make_service(max_batch=4, max_wait_ms=0, drain_timeout_s=0.5)
    clip = clips[2]
    head = clip.audio[:12000]
    st = ServerThread(svc).start()

    async def main():
        async with connect(st.url, max_size=None, ping_interval=None) as ws:
            await ws.send(cfg())
            await ws.recv()
            for i in range(0, len(head), 4000):
                await ws.send(encode_chunk(head[i:i + 4000]))
            await asyncio.sleep(0.3)  # then silence: the client never ends its stream
            threading.Thread(target=st.stop).start()
            msgs = []
            async for raw in ws:
                msgs.append(json.loads(raw))
            return msgs, ws.close_code

    try:
        msgs, code = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        st.stop()
    assert msgs[-1]["type"] == "final" and msgs[-1]["reason"] == "shutdown"
    assert msgs[-1]["text"] == offline_text(svc, head)
    assert code == 1001


def test_server_busy():
    # both streams come from 127.0.0.1: no per-client cap (by default it would be half of the 2 connections)
    svc = make_service(max_streams=1, max_connections_per_client=None)

    async def main(url):
        async with connect(url, ping_interval=None) as ws:
            await ws.send(cfg())
            await ws.recv()
            second = await raw_session(url, [cfg()])
            await ws.send(json.dumps({"type": "end"}))
            last = json.loads(await ws.recv())
        return second, last

    with ServerThread(svc) as st:
        (msgs, code), last = asyncio.run(main(st.url))
    assert msgs[-1]["code"] == "server_busy" and code == 1013
    assert last["type"] == "final" and last["text"] == ""


def test_per_stream_boosts():
    svc = make_service("demo-rnnt", "beam", {"beam": 4, "boost_weight": 1.0}, max_batch=4, max_wait_ms=50)
    clip = load_clips(["data/synth_test/000016.wav"])[0]  # "the anchor is up" (held-out voice)
    # measured: no boost "the ancerries up", "anchor" alone "the anchories up"
    boosts = [None, {"the": 2.0, "anchor": 2.0, "is": 2.0, "up": 2.0}, {"anchor": 3.0}]

    async def main(url):
        return await asyncio.gather(*(run_load(url, [clip], 1, chunk_seconds=0.25, stagger=False, boosts=b)
                                      for b in boosts))

    with ServerThread(svc) as st:
        reports = asyncio.run(main(st.url))
    texts = [r.results[0].final_text for r in reports]
    assert texts == [offline_text(svc, clip.audio, boosts=b) for b in boosts]
    assert texts[1] == "the anchor is up" and len(set(texts)) == 3  # each stream got its own boosts
    assert max(len(b.keys) for b in svc.batcher.history) > 1


def test_cli_serve_and_loadtest(tmp_path):
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", "loadtest", "--spawn", "--streams", "2",
                           "--chunk-seconds", "0.5", "--audio", CLIPS[0], "--max-batch", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RTFx" in proc.stdout and "compute" in proc.stdout
    rep = json.loads(out.read_text())
    assert rep["summary"]["finished"] == 2 and len(rep["streams"]) == 2


def test_cli_serves_a_bundle_that_is_not_bundled(tmp_path):
    # a ModelBundle test double (tests/bundle_double.py) through `serve`, unchanged
    import os

    import suite_paths

    out = tmp_path / "load.json"
    env = dict(os.environ, PYTHONPATH=suite_paths.pythonpath())
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", "loadtest", "--spawn", "--streams", "2",
                           "--model", "bundle_double:ctc_bundle", "--decoder", "beam", "--beam", "4",
                           "--chunk-seconds", "0.5", "--audio", CLIPS[0], "--max-batch", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(out.read_text())
    assert rep["summary"]["finished"] == 2 and rep["summary"]["failed"] == 0
    import bundle_double
    import torch
    from asrdecode.streaming import StreamDecoder

    dec = StreamDecoder(bundle_double.ctc_bundle(), decoder="beam", beam=4)
    audio = load_clips([CLIPS[0]])[0].audio
    with torch.inference_mode():
        want = dec.offline(torch.from_numpy(quantized(audio))).text or ""
    assert [s["final_text"] for s in rep["streams"]] == [want, want]


def test_cli_names_the_extra_when_server_packages_are_missing(monkeypatch, capsys):
    import asrdecode.serving as serving
    from asrdecode import cli

    monkeypatch.setattr(serving, "missing_serve_deps", lambda: ["uvicorn"])
    assert cli.main(["serve"]) == 2
    assert "pip install -e '.[serve]'" in capsys.readouterr().err
    assert cli.main(["loadtest", "--spawn"]) == 2
    assert "pip install -e '.[serve]'" in capsys.readouterr().err


def test_idle_client_and_vanished_client_leave_nothing_behind(clips):
    svc = make_service(max_batch=4, max_wait_ms=0,
                       limits=Limits(max_chunk_seconds=1.0, config_timeout_s=0.5, idle_timeout_s=1.0))
    clip = clips[0]

    async def vanish(url):
        ws = await connect(url, ping_interval=None)
        await ws.send(cfg())
        await ws.recv()
        for i in range(0, 12000, 4000):
            await ws.send(encode_chunk(clip.audio[i:i + 4000]))
        ws.transport.abort()  # gone without a close handshake

    async def main(url):
        silent_config = await raw_session(url, [])                 # never configures
        idle = await raw_session(url, [cfg(), encode_chunk(clip.audio[:4000]), 2.5])  # stops sending
        await vanish(url)
        good = await run_load(url, [clip], 1, chunk_seconds=0.25, stagger=False)
        await asyncio.sleep(0.5)
        return silent_config, idle, good

    with ServerThread(svc) as st:
        silent_config, idle, good = asyncio.run(main(st.url))
        health = svc.health()
        open_in_decoder = len(svc.decoder)
    assert silent_config[0][-1]["code"] == "idle_timeout" and silent_config[1] == 1008
    assert idle[0][-1]["code"] == "idle_timeout" and idle[0][0]["type"] == "ready"
    assert good.results[0].ok and good.results[0].final_text == offline_text(svc, clip.audio)
    assert health["streams"] == 0 and open_in_decoder == 0


def test_protocol_checks():
    from asrdecode.serving.protocol import ProtocolError, parse_config, parse_control

    lim = Limits(max_chunk_seconds=0.5, max_boosts=2, max_phrase_chars=10)
    c = parse_config(cfg(encoding="f32le", boosts={"  ten   of ": 2}, name="n"), lim)
    assert (c.encoding, c.boosts, c.name) == ("f32le", {"ten of": 2.0}, "n")
    assert parse_control('{"type": "end"}', lim) == "end"
    x = np.array([0.0, 0.5, -1.0, 0.999], np.float32)
    assert np.array_equal(decode_chunk(encode_chunk(x, "f32le"), "f32le", lim), x)
    assert np.allclose(decode_chunk(encode_chunk(x, "s16le"), "s16le", lim), x, atol=1 / 32768)
    assert lim.max_chunk_bytes("s16le") == 16000 and lim.max_chunk_bytes("f32le") == 32000
    bad = {
        cfg(boosts={"a": 1, "b": 1, "c": 1}): "bad_boosts",
        cfg(boosts={"x" * 11: 1}): "bad_boosts",
        cfg(boosts={"a": float("inf")}): "bad_boosts",
        cfg(boosts={"a": True}): "bad_boosts",
        cfg(name=5): "bad_config",
        json.dumps({"sample_rate": 16000.0}): "bad_sample_rate",
        json.dumps({"encoding": "s16le"}): "bad_config",
        "x" * (lim.max_text_bytes + 1): "message_too_large",
    }
    for text, code in bad.items():
        with pytest.raises(ProtocolError) as info:
            parse_config(text, lim)
        assert info.value.code == code, text[:40]
    for text in ('{"type": "end", "x": 1}', '"end"', "end"):
        with pytest.raises(ProtocolError):
            parse_control(text, lim)
    with pytest.raises(ProtocolError):
        decode_chunk(b"\0" * 16002, "s16le", lim)
    with pytest.raises(ValueError):
        Limits(max_chunk_seconds=0)


def test_serve_takes_the_word_lm(tmp_path):
    """``serve --word-lm`` (as ``transcribe --word-lm``): the service's beam search fuses a WordNGramLM with
    the given weight and per-word bonus; misuse is a clear error."""
    from asrdecode.cli import CLIError, _server_config, build_parser
    from asrdecode.errors import DecodingInputError, FileFormatError
    from asrdecode.lm import WordNGramLM
    from asrdecode.models import load_bundle
    from asrdecode.serving import server as server_mod

    arpa = tmp_path / "words.arpa"
    arpa.write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n-1.0\t<unk>\n-0.5\tthe\n"
                    "-0.7\tcat\n\n\\end\\\n")

    def config(*flags: str):
        args = build_parser().parse_args(["serve", "--model", "demo-ctc", *flags])
        return _server_config(args, server_mod)

    cfg = config("--decoder", "beam", "--beam", "2", "--word-lm", str(arpa), "--word-lm-weight", "0.4",
                 "--word-bonus", "1.0")
    assert cfg.decoder_options["word_lm"] == str(arpa)
    _, options = server_mod.bundle_decoding(load_bundle("demo-ctc"), cfg.decoder, cfg.decoder_options)
    found = [(m, w) for m, w in options["fusion"] if isinstance(m, WordNGramLM)]
    assert len(found) == 1 and abs(found[0][1] - 0.4) < 1e-9
    svc = server_mod.build_service(cfg)  # the StreamDecoder takes it
    assert svc.config.decoder == "beam"
    # misuse is refused where the options are resolved (as transcribe resolves them), before serving
    with pytest.raises(DecodingInputError, match="--word-lm does not apply to --decoder greedy"):
        server_mod.build_service(config("--decoder", "greedy", "--word-lm", str(arpa)))
    with pytest.raises(DecodingInputError, match="--word-bonus needs --word-lm"):
        server_mod.build_service(config("--decoder", "beam", "--word-bonus", "1"))
    with pytest.raises(FileFormatError, match="no such word LM"):
        server_mod.build_service(config("--decoder", "beam", "--word-lm", str(tmp_path / "missing.arpa")))
    with pytest.raises(CLIError, match="decoder_options"):  # ill-typed: refused by ServerConfig itself
        config("--decoder", "beam", "--option", 'beam="2"')
    with pytest.raises(DecodingInputError, match="--word-bonus needs --word-lm"):
        server_mod.bundle_decoding(load_bundle("demo-ctc"), "beam", {"word_bonus": 1.0})
    with pytest.raises(DecodingInputError):  # a word LM on a decoder without fusion
        server_mod.bundle_decoding(load_bundle("demo-ctc"), "greedy", {"word_lm": str(arpa)})
