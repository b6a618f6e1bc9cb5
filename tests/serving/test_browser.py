"""The server's browser page (``asrdecode.serving.web``, ``serving/static``) in a real headless
Chromium driven by Playwright: microphone streaming from Chromium's fake capture device, file
upload (``POST /v1/audio/transcriptions``) and drag-and-drop, word playback, pages at once,
refusals, and the same-origin rule.

References: an uploaded file is decoded offline, whole, so its words equal plain ``asrdecode
transcribe``'s on the file. The microphone streams, and the server encodes a stream in blocks
(``StreamDecoder``): its words equal the server's own decoder's :meth:`StreamDecoder.offline
<asrdecode.streaming.StreamDecoder.offline>` on the audio the page sent (docs/serving.md, *The cost
of the block front end*).

Chromium comes from Debian (``apt-get install chromium``: ``make test`` and ``.ci/run`` install it;
Playwright's own browser download is not used). Without it the browser tests skip and say so;
the page's HTTP routes and the origin check are tested without a browser.

``ASRDECODE_DOCS_SCREENSHOT=1`` makes the screenshot test write ``docs/browser-page.png``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from asrdecode.serving.protocol import CLOSE_CODES, Limits  # noqa: E402
from asrdecode.serving.server import ServerConfig, ServerThread, build_service  # noqa: E402
from asrdecode.serving.transcriptions import ERROR_CODES as API_ERROR_CODES  # noqa: E402
from asrdecode.serving.web import host_allowed, model_name, same_origin, server_info  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "data" / "real"
MODEL, DECODER = "demo-rnnt", "greedy"
UPLOAD_CLIPS = ["cards-002.wav", "cards-005.wav", "librivox-sense_and_sensibility_01_austen_64kb-0880.wav",
                "librivox-sense_and_sensibility_01_austen_64kb-0890.wav"]
MIC_CLIPS = ["cards-005.wav", "librivox-sense_and_sensibility_01_austen_64kb-0880.wav",
             "librivox-sense_and_sensibility_01_austen_64kb-0930.wav"]
# clips of 2.9 s and more, shortest first
LONG_CLIPS = [name for frames, name in sorted((wave.open(str(p)).getnframes(), p.name) for p in REAL.glob("*.wav"))
              if frames >= 2.9 * 16000]
RATE = 16000
MIC_LEAD_S, MIC_TAIL_S = 1.0, 2.0    # silence around a clip in the fake capture file
MIC_STOP_AFTER_TAIL_S = 1.0          # stop the microphone this far into the trailing silence


# ------------------------------------------------------------------------------------ helpers
def read_pcm(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def write_pcm(path: Path, pcm: np.ndarray, rate: int = RATE) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, "<i2").tobytes())
    return path


def float_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> Path:
    """A 32-bit IEEE float mono WAV (the wave module writes PCM only)."""
    data = np.asarray(samples, "<f4").tobytes()
    fmt = (1 + 2).to_bytes(2, "little") + (1).to_bytes(2, "little") + rate.to_bytes(4, "little") \
        + (rate * 4).to_bytes(4, "little") + (4).to_bytes(2, "little") + (32).to_bytes(2, "little")
    body = b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt + b"data" + len(data).to_bytes(4, "little") + data
    path.write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    return path


def cli_transcribe(paths: list[Path]) -> dict[str, dict]:
    """``asrdecode transcribe`` (whole files, as the upload endpoint decodes them) of ``paths``: {path: record}."""
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", "--model", MODEL, "--decoder", DECODER,
           "--format", "json", *map(str, paths)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    records = records if isinstance(records, list) else [records]
    return {r["audio"]: r for r in records}


def stream_records(server, paths: list[Path]) -> dict[str, dict]:
    """The server's stream decoder (its block front end) on the whole of each file: {path: record}."""
    import torch

    from asrdecode.audio import read_audio
    from asrdecode.records import hypothesis_record

    svc = server.service
    out = {}
    with torch.inference_mode():
        for p in paths:
            hyp = svc.decoder.offline(read_audio(p))
            out[str(p)] = hypothesis_record(hyp, svc.tokenizer, svc.frame_seconds, str(p))
    return out


def words_of(record: dict) -> list[tuple[str, float, float]]:
    return [(w["word"], round(w["start"], 3), round(w["end"], 3)) for w in record.get("words") or []]


def http_get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def chromium_executable() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


# ----------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def server():
    # every page comes from 127.0.0.1: 20 of them (a WebSocket and the keep-alive connections that
    # loaded the page, each) are more than the default per-client cap of 32 connections
    service = build_service(ServerConfig(model=MODEL, decoder=DECODER, max_wait_ms=10.0,
                                         max_connections_per_client=None, limits=Limits(max_chunk_seconds=2.0)))
    with ServerThread(service) as srv:
        srv.page_url = f"http://{srv.host}:{srv.port}/"
        yield srv


@pytest.fixture(scope="module")
def reference() -> dict[str, dict]:
    """The CLI's records of the upload clips and the long clips, by file name."""
    names = sorted(set(UPLOAD_CLIPS) | set(LONG_CLIPS) | set(MIC_CLIPS))
    got = cli_transcribe([REAL / n for n in names])
    return {Path(k).name: v for k, v in got.items()}


@pytest.fixture(scope="module")
def playwright():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    if chromium_executable() is None:
        pytest.skip("no Chromium: `apt-get install chromium` (make test and .ci/run install it)")
    with sync_api.sync_playwright() as p:
        yield p


def launch(playwright, fake_audio: Path | None = None):
    args = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            "--autoplay-policy=no-user-gesture-required"]
    if fake_audio is not None:
        args.append(f"--use-file-for-fake-audio-capture={fake_audio}")
    return playwright.chromium.launch(executable_path=chromium_executable(), args=args)


@pytest.fixture(scope="module")
def browser(playwright):
    b = launch(playwright)
    yield b
    b.close()


def open_page(browser, url: str, *, csp: bool = False):
    """A page of the server, loaded and holding the server's info. ``csp=False`` lets Playwright's
    string predicates run (they evaluate code, which the page's Content-Security-Policy forbids)."""
    context = browser.new_context(bypass_csp=not csp, viewport={"width": 960, "height": 560})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.page_errors = errors
    page.goto(url)
    page.wait_for_selector("#file:not([disabled])", state="attached")
    return page


def run_of(page) -> dict:
    return page.evaluate("""() => { const r = window.asrPage.run; return r && {
        source: r.source, name: r.name, encoding: r.encoding, done: r.done, error: r.error, errorCode: r.errorCode,
        final: r.final, events: r.events, sends: r.sends, startedAt: r.startedAt, endSentAt: r.endSentAt,
        finishedAt: r.finishedAt, inputRate: r.inputRate, samplesSent: r.samplesSent}; }""")


def runs_so_far(page) -> int:
    return page.evaluate("window.asrPage.runs.length")


def upload(page, path: Path) -> int:
    """Chooses ``path`` in the file input; returns the number of runs before it (for :func:`wait_done`)."""
    before = runs_so_far(page)
    page.set_input_files("#file", str(path))
    return before


def wait_done(page, before: int, timeout_s: float = 60.0) -> dict:
    """The page's run after the ``before`` earlier ones, once it has ended."""
    page.wait_for_function("(n) => window.asrPage.runs.length > n && window.asrPage.run.done", arg=before,
                           timeout=timeout_s * 1000)
    return run_of(page)


# --------------------------------------------------------------- no browser: routes and origins
def test_same_origin_rule() -> None:
    assert same_origin(None, "127.0.0.1:8000")                       # not a browser
    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert same_origin("http://LOCALHOST:8000", "localhost:8000")
    assert same_origin("https://asr.example.org", "asr.example.org")  # TLS proxy, default port
    assert same_origin("https://asr.example.org", "asr.example.org:443")
    assert same_origin("http://[::1]:9000", "[::1]:9000")
    assert not same_origin("http://evil.example:8000", "127.0.0.1:8000")
    assert not same_origin("http://127.0.0.1:8001", "127.0.0.1:8000")
    assert not same_origin("https://127.0.0.1:8000", "127.0.0.1")
    assert not same_origin("http://asr.example.org", "asr.example.org:443")
    for bad in ("null", "", "file://", "127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://127.0.0.1:8000/page",
                "http://[::1", "http://:8000"):
        assert not same_origin(bad, "127.0.0.1:8000"), bad
    assert not same_origin("http://127.0.0.1:8000", None)
    assert not same_origin("http://127.0.0.1:8000", "")
    assert not same_origin("http://127.0.0.1:8000", "127.0.0.1:notaport")
    assert not same_origin("http://u:p@127.0.0.1:8000", "127.0.0.1:8000")  # userinfo: refused
    assert not same_origin("http://127.0.0.1:8000@evil.example", "evil.example")


def test_host_rule() -> None:
    """Hosts the server answers to: loopback names and addresses, the bind address, --allowed-hosts;
    any IP address when bound to every interface; a foreign name (DNS rebinding) never."""
    assert host_allowed(None, "127.0.0.1")  # no Host header: not a browser
    for host in ("127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:9000", "127.0.0.2:1"):
        assert host_allowed(host, "127.0.0.1"), host
    assert host_allowed("10.1.2.3:8000", "10.1.2.3") and host_allowed("asr.lan:8000", "asr.lan")
    assert host_allowed("asr.example.org", "127.0.0.1", frozenset({"asr.example.org"}))
    assert host_allowed("192.168.1.20:8000", "0.0.0.0") and host_allowed("[fe80::1]:80", "::")
    for host in ("evil.example:8000", "evil.example", "10.1.2.4:8000", "", "[::1", "localhost.evil.example",
                 "127.0.0.1.evil.example", "u@127.0.0.1"):
        assert not host_allowed(host, "10.1.2.3", frozenset({"asr.example.org"})), host
    assert not host_allowed("evil.example", "0.0.0.0")


def test_info_shows_scalar_options_only() -> None:
    class Service:
        frame_seconds = 0.08
        config = ServerConfig(model="demo-ctc", decoder="beam", max_streams=3, decoder_options={
            "beam": 8, "method": "alsd", "blank_collapse": True, "graph": "/srv/asr/tlg.pt", "fusion": [object()]})

    info = server_info(Service(), "/v1/stream")
    Service.config = ServerConfig(model="/srv/models/my-model.nemo", decoder="beam")
    assert server_info(Service(), "/v1/stream")["model"] == "my-model.nemo"  # its name, not the server's path
    assert (model_name("/srv/models/onnx-dir/"), model_name("demo-ctc"), model_name("pkg.mod:attr")) == \
        ("onnx-dir", "demo-ctc", "pkg.mod:attr")
    assert info["decoder_options"] == {"beam": 8, "method": "alsd", "blank_collapse": True}
    assert (info["model"], info["decoder"], info["max_streams"], info["sample_rate"]) == ("demo-ctc", "beam", 3, 16000)
    json.dumps(info)


def test_page_routes_and_info(server) -> None:
    status, headers, body = http_get(server.page_url)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in headers["content-security-policy"]
    html = body.decode()
    assert '<script type="module" src="/static/app.js">' in html
    assert not re.search(r"""(src|href)=["']https?://""", html)        # nothing from elsewhere
    static = Path(__file__).resolve().parents[2] / "src/asrdecode/serving/static"
    for f in sorted(static.iterdir()):
        status, headers, body = http_get(server.page_url + "static/" + f.name)
        assert status == 200 and body == f.read_bytes(), f.name
        if f.suffix == ".js":
            assert "javascript" in headers["content-type"]
            assert not re.search(r"""(import|from)\s*\(?\s*["']https?://""", body.decode()), f.name
    for missing in ("static/nothing.js", "static/../server.py", "static/%2e%2e/server.py", "nothing"):
        assert http_get(server.page_url + missing)[0] == 404, missing
    status, _, body = http_get(server.page_url + "v1/info")
    info = json.loads(body)
    assert status == 200
    assert (info["model"], info["decoder"], info["sample_rate"], info["stream_path"]) == (MODEL, DECODER, 16000,
                                                                                          "/v1/stream")
    assert info["frame_seconds"] == pytest.approx(0.08) and info["max_chunk_seconds"] == 2.0


def test_websocket_origin_check(server) -> None:
    url = server.url
    host = f"{server.host}:{server.port}"
    for origin in ("http://evil.example", f"http://localhost:{server.port}", "null"):
        with pytest.raises(InvalidStatus) as err:
            connect(url, origin=origin, open_timeout=10)
        assert err.value.response.status_code == 403, origin
    # DNS rebinding: a foreign name re-pointed at the server, Origin matching that Host (it got 101)
    evil = f"evil.example:{server.port}"
    import socket

    for name in ("evil.example", "localhost"):  # the same handshake with the Host a loopback name: served
        sock = socket.create_connection((server.host, server.port), timeout=10)
        try:
            with connect(f"ws://{name}:{server.port}/v1/stream", sock=sock, origin=f"http://{name}:{server.port}",
                         open_timeout=10) as ws:
                ws.send(json.dumps({"sample_rate": 16000}))
                assert name == "localhost" and json.loads(ws.recv(timeout=10))["type"] == "ready"
        except InvalidStatus as err:
            assert name == "evil.example" and err.response.status_code == 403
    for path in ("", "v1/info", "health", "static/app.js"):
        assert http_get(server.page_url + path, {"Host": evil})[0] == 421, path
        assert http_get(server.page_url + path, {"Host": f"localhost:{server.port}"})[0] == 200, path
    for origin in (None, f"http://{host}"):  # no Origin (not a browser), or the server's own
        with connect(url, origin=origin, open_timeout=10) as ws:
            ws.send(json.dumps({"sample_rate": 16000}))
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            ws.send(json.dumps({"type": "end"}))
            assert json.loads(ws.recv(timeout=10))["type"] == "final"


# --------------------------------------------------------------------------- in the browser
def test_upload_equals_cli(server, browser, reference) -> None:
    """An uploaded file goes to POST /v1/audio/transcriptions (no stream is opened): its text and word
    times are plain ``asrdecode transcribe``'s on the file."""
    page = open_page(browser, server.page_url)
    assert page.inner_text("#info").startswith(f"model {MODEL} · decoder {DECODER}")
    health = json.loads(http_get(server.health_url)[2])
    done = server.service.transcriber.done
    for name in UPLOAD_CLIPS:
        run = wait_done(page, upload(page, REAL / name))
        ref = reference[name]
        assert run["error"] is None and run["source"] == "file"
        assert run["final"]["text"] == ref["text"], name
        assert words_of(run["final"]) == words_of(ref), name
        assert [e["type"] for e in run["events"]] == ["final"]
        audio_s = read_pcm(REAL / name).size / RATE
        assert run["final"]["audio_seconds"] == pytest.approx(audio_s, abs=1e-3)
        shown = [b.split("\n")[0] for b in page.locator(".word").all_inner_texts()]
        assert shown == [w for w, _, _ in words_of(ref)]
        assert page.is_hidden("#error")
    assert page.page_errors == []
    assert server.service.transcriber.done - done == len(UPLOAD_CLIPS)
    assert json.loads(http_get(server.health_url)[2])["completed"] == health["completed"]  # no stream


def test_drop_a_file_equals_cli(server, browser, reference) -> None:
    """Drag-and-drop; the file's name is longer than the protocol's 200 characters (the page cuts it)."""
    page = open_page(browser, server.page_url)
    name = UPLOAD_CLIPS[2]
    long_name = "x" * 250 + name
    before = runs_so_far(page)
    data = base64.b64encode((REAL / name).read_bytes()).decode()
    page.evaluate("""([name, data]) => {
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name, { type: "audio/wav" }));
        const zone = document.getElementById("drop");
        zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
        zone.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
    }""", [long_name, data])
    run = wait_done(page, before)
    assert run["name"] == long_name and run["error"] is None
    assert words_of(run["final"]) == words_of(reference[name])


def test_word_click_plays_its_span(server, browser, reference) -> None:
    page = open_page(browser, server.page_url)
    name = UPLOAD_CLIPS[3]
    wait_done(page, upload(page, REAL / name))
    words = words_of(reference[name])
    k = len(words) // 2
    page.locator(".word").nth(k).click()
    played = page.evaluate("window.asrPage.lastPlayed")
    word, start, end = words[k]
    assert (played["word"], played["start"], played["end"]) == (word, start, end)
    assert played["samples"] == min(int(np.ceil(end * RATE)), read_pcm(REAL / name).size) - int(start * RATE)
    assert word in page.inner_text("#status")


def test_page_works_under_its_content_security_policy(server, browser, reference) -> None:
    """No bypass: the page's own CSP is enforced, and an upload still shows its words."""
    page = open_page(browser, server.page_url, csp=True)
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    name = UPLOAD_CLIPS[0]
    upload(page, REAL / name)
    page.wait_for_selector(".word", timeout=30000)
    assert page.locator(".word .w").all_inner_texts() == [w for w, _, _ in words_of(reference[name])]
    assert not [m for m in messages if "Content Security Policy" in m] and page.page_errors == []


def test_microphone_refused_by_the_browser(server, browser) -> None:
    """No microphone (permission denied): an error line, and no stream is opened."""
    context = browser.new_context(bypass_csp=True)
    context.add_init_script("navigator.mediaDevices.getUserMedia = () => "
                            "Promise.reject(new DOMException('Permission denied', 'NotAllowedError'));")
    page = context.new_page()
    page.goto(server.page_url)
    page.wait_for_selector("#mic-start:not([disabled])")
    before = json.loads(http_get(server.health_url)[2])
    page.click("#mic-start")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error") == "Microphone unavailable: Permission denied"
    page.wait_for_selector("#mic-start:not([disabled])")
    assert runs_so_far(page) == 0 and page.is_disabled("#mic-stop")
    after = json.loads(http_get(server.health_url)[2])
    assert after["completed"] == before["completed"] and after["streams"] == 0
    context.close()


def test_every_server_error_code_has_a_line(server, browser) -> None:
    page = open_page(browser, server.page_url)
    assert set(page.evaluate("Object.keys(window.asrPage.ERROR_TEXT)")) == set(CLOSE_CODES) | set(API_ERROR_CODES)
    for code in CLOSE_CODES:
        page.evaluate("(code) => window.asrPage.showError(window.asrPage.describeError(code, 'the details'))", code)
        line = page.inner_text("#error")
        assert page.is_visible("#error")
        assert page.evaluate("(code) => window.asrPage.ERROR_TEXT[code]", code) in line
        assert f"[{code}: the details]" in line


def test_resampler_and_wav_reader_in_the_browser(server, browser, tmp_path) -> None:
    page = open_page(browser, server.page_url)
    got = page.evaluate("""async () => {
        const { Resampler, resample } = await import("/static/resample.js");
        const tone = (f, rate, n) => Float32Array.from({ length: n }, (_, i) => Math.sin(2 * Math.PI * f * i / rate));
        const rms = (x) => Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length);
        const x = tone(1000, 48000, 48000);
        const whole = resample(x, 48000, 16000);
        const r = new Resampler(48000, 16000);
        const parts = [];
        for (let i = 0; i < x.length; i += 128 + (i % 7)) parts.push(...r.process(x.subarray(i, i + 128 + (i % 7))));
        parts.push(...r.flush());
        const ref = tone(1000, 16000, 16000);
        let err = 0;
        for (let i = 200; i < 15800; i++) err = Math.max(err, Math.abs(whole[i] - ref[i]));
        let streamDiff = 0;
        for (let i = 0; i < whole.length; i++) streamDiff = Math.max(streamDiff, Math.abs(whole[i] - parts[i]));
        const alias = resample(tone(12000, 48000, 48000), 48000, 16000).subarray(200, 15800);
        let bad = null;
        try { new Resampler(0, 16000); } catch (e) { bad = e.message; }
        return { n: whole.length, streamed: parts.length, err, streamDiff, alias: rms(alias),
                 n441: resample(new Float32Array(44100), 44100, 16000).length,
                 n8k: resample(tone(500, 8000, 8000), 8000, 16000).length,
                 same: Array.from(resample(Float32Array.of(0.5, -0.25), 16000, 16000)), bad };
    }""")
    assert got["n"] == got["streamed"] == 16000 and got["n441"] == 16000 and got["n8k"] == 16000
    assert got["err"] < 1e-3, got           # a 1 kHz tone passes unchanged
    assert got["streamDiff"] < 1e-6         # block by block = all at once
    assert got["alias"] < 0.01              # 12 kHz (above the new Nyquist) is removed, not folded to 4 kHz
    assert got["same"] == [0.5, -0.25] and "sample rates must be positive" in got["bad"]

    # WAV reader: 24-bit stereo at 44.1 kHz, 8-bit; broken files name what is wrong
    rng = np.random.default_rng(0)
    stereo = rng.integers(-2 ** 23, 2 ** 23, size=(300, 2))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(3)
        w.setframerate(44100)
        w.writeframes(b"".join(int(v).to_bytes(3, "little", signed=True) for v in stereo.ravel()))
    cases = {"s24": buf.getvalue(), "notwav": b"hello, not audio", "nofmt": b"RIFF\x04\x00\x00\x00WAVE",
             "alaw": b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
             + (6).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little")
             + (8000).to_bytes(4, "little") + (1).to_bytes(2, "little") + (8).to_bytes(2, "little")
             + b"data" + (0).to_bytes(4, "little")}
    parsed = page.evaluate("""async (cases) => {
        const { parseWav } = await import("/static/wav.js");
        const out = {};
        for (const [k, b64] of Object.entries(cases)) {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            try { const w = parseWav(bytes.buffer); out[k] = { rate: w.sampleRate, channels: w.channels, bits: w.bits,
                                                               mono: Array.from(w.mono) }; }
            catch (e) { out[k] = { error: e.message }; }
        }
        return out;
    }""", {k: base64.b64encode(v).decode() for k, v in cases.items()})
    s24 = parsed["s24"]
    assert (s24["rate"], s24["channels"], s24["bits"]) == (44100, 2, 24)
    np.testing.assert_allclose(s24["mono"], stereo.mean(axis=1) / 2 ** 23, atol=1e-6)
    assert parsed["notwav"]["error"] == "not a WAV file (no RIFF/WAVE header)"
    assert parsed["nofmt"]["error"] == "WAV file without a fmt chunk"
    assert parsed["alaw"]["error"] == "WAV format 6 is not PCM or IEEE float"


def _wav_header_rate(rate: int, samples: int = 400) -> bytes:
    """A 16-bit mono PCM WAV whose header says ``rate`` Hz (any uint32)."""
    data = np.zeros(samples, "<i2").tobytes()
    return (b"RIFF" + (36 + len(data)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
            + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + rate.to_bytes(4, "little")
            + (rate * 2 % 2 ** 32).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
            + b"data" + len(data).to_bytes(4, "little") + data)


def test_the_page_refuses_the_file_rates_the_server_refuses(server, browser, tmp_path) -> None:
    """WAV headers at rates outside the server's file bounds (/v1/info's file_sample_rates, asrdecode.audio's
    MIN/MAX_SAMPLE_RATE) get an error line at once: 4,294,967,295 Hz had the resampler allocate 6.9 GB for
    57 s, 1 Hz died with a RangeError. The bounds themselves are read."""
    from asrdecode.audio import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE

    info = json.loads(http_get(server.page_url + "v1/info")[2])
    assert info["file_sample_rates"] == {"min": MIN_SAMPLE_RATE, "max": MAX_SAMPLE_RATE}
    page = open_page(browser, server.page_url)
    for rate in (2 ** 32 - 1, 1, MIN_SAMPLE_RATE - 1, MAX_SAMPLE_RATE + 1):
        path = tmp_path / f"r{rate}.wav"
        path.write_bytes(_wav_header_rate(rate))
        t0 = time.monotonic()
        line, _ = error_after(page, lambda: upload(page, path))  # noqa: B023
        assert time.monotonic() - t0 < 10
        assert line == f"{path.name}: WAV sample rate {rate} Hz is outside {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz"
    for rate in (MIN_SAMPLE_RATE, MAX_SAMPLE_RATE):  # the bounds themselves pass
        path = tmp_path / f"ok{rate}.wav"
        path.write_bytes(_wav_header_rate(rate, samples=rate // 4))
        run = wait_done(page, upload(page, path))
        assert run["error"] is None, run
    assert page.page_errors == []


def test_microphone_equals_cli_on_the_audio_it_sent(server, playwright, reference, tmp_path) -> None:
    """Three clips through Chromium's fake capture device, in three browsers at once.

    The device plays the WAV at its own rate (44.1 or 48 kHz) and loops it, and the page
    resamples to 16 kHz: the audio the server gets is the clip, resampled twice, with the
    silence around it, not the file's samples. So (a) the page's final transcript must equal the
    server's stream decoder's on the exact audio the page sent (it keeps it); (b) that audio must be the clip (its
    normalised cross-correlation with the file, at the best lag, is near 1); (c) partial results
    with words must arrive before the clip's last sample was even sent.
    """
    browsers, pages = [], []
    try:
        for name in MIC_CLIPS:
            clip = read_pcm(REAL / name)
            fake = write_pcm(tmp_path / f"fake-{name}", np.concatenate(
                [np.zeros(int(MIC_LEAD_S * RATE), "<i2"), clip, np.zeros(int(MIC_TAIL_S * RATE), "<i2")]))
            b = launch(playwright, fake)
            browsers.append(b)
            page = open_page(b, server.page_url)
            pages.append(page)
        for page in pages:
            page.click("#mic-start")
        targets = [(MIC_LEAD_S + read_pcm(REAL / n).size / RATE + MIC_STOP_AFTER_TAIL_S) * RATE for n in MIC_CLIPS]
        stopped = [False] * len(pages)
        end = time.monotonic() + 60
        while not all(stopped) and time.monotonic() < end:
            for i, page in enumerate(pages):  # (the run begins once the device is open)
                sent_now = page.evaluate("window.asrPage.run ? window.asrPage.run.samplesSent : 0")
                if not stopped[i] and sent_now >= targets[i]:
                    page.click("#mic-stop")
                    stopped[i] = True
            time.sleep(0.05)
        assert all(stopped), "the microphone did not deliver the clip's audio in time"
        runs = [wait_done(page, 0) for page in pages]
        sent = []
        for name, page, run in zip(MIC_CLIPS, pages, runs):
            assert run["error"] is None and run["source"] == "mic", run["error"]
            pcm = np.frombuffer(base64.b64decode(page.evaluate("window.asrPage.run.sentWavBase64()"))[44:], "<i2")
            assert pcm.size == run["samplesSent"]
            assert run["final"]["audio_seconds"] == pytest.approx(pcm.size / RATE, abs=1e-4)
            sent.append(write_pcm(tmp_path / f"sent-{name}", pcm))
    finally:
        for b in browsers:
            b.close()
    placed = []  # the file's own samples where the clip sits in the sent audio (diagnostics only)
    for name, path in zip(MIC_CLIPS, sent):
        clip, got = read_pcm(REAL / name), read_pcm(path)
        lag, _ = best_alignment(low_pass(got.astype(np.float64)), low_pass(clip.astype(np.float64)))
        pcm = np.zeros_like(got)
        pcm[lag:lag + clip.size] = clip[: got.size - lag]
        placed.append(write_pcm(tmp_path / f"placed-{name}", pcm))
    cli = stream_records(server, sent + placed)
    for name, path, run, same in zip(MIC_CLIPS, sent, runs, placed):
        # (a) exact: the page's words and times are the stream decoder's on the same samples
        assert words_of(run["final"]) == words_of(cli[str(path)]), name
        # (b) the audio sent is the clip
        clip = read_pcm(REAL / name).astype(np.float64)
        got = read_pcm(path).astype(np.float64)
        lag, corr = best_alignment(low_pass(got), low_pass(clip))
        pieces = pieces_found(low_pass(got), low_pass(clip), lag)
        found = [c >= 0.9 for c, _ in pieces]
        assert sum(found) >= 0.9 * len(found), (
            f"{name}: the sent audio does not hold the clip (correlation {corr:.3f} at {lag / RATE:.3f} s; "
            f"pieces (correlation, shift s): {[(round(c, 3), round(d / RATE, 3)) for c, d in pieces]})")
        # (c) words before the end of the clip had been sent
        clip_end = lag + clip.size
        end_sent = next(s["t"] for s in run["sends"] if s["samples"] >= clip_end)
        early = [e for e in run["events"] if e["type"] == "partial" and e["text"] and e["t"] < end_sent]
        assert early, f"{name}: no partial words before the clip's end was sent"
        assert all(e["audio_seconds"] * RATE <= clip_end for e in early)
        print(f"{name}: input {run['inputRate']} Hz, lag {lag / RATE:.3f} s, correlation {corr:.4f}, "
              f"first words {(end_sent - early[0]['t']) / 1000:.2f} s before the clip's end was sent; "
              f"mic {run['final']['text']!r}, file at the same place {cli[str(same)]['text']!r}, "
              f"file alone {reference[name]['text']!r}")


def low_pass(x: np.ndarray, cutoff_hz: float = 2000.0) -> np.ndarray:
    """``x`` without its content above ``cutoff_hz`` (the two resamplings on the way leave the clip
    shifted by a fraction of a sample, which decorrelates the top of the band)."""
    spectrum = np.fft.rfft(x)
    spectrum[np.fft.rfftfreq(x.size, 1 / RATE) > cutoff_hz] = 0
    return np.fft.irfft(spectrum, x.size)


def pieces_found(signal: np.ndarray, clip: np.ndarray, lag: int, piece: int = RATE // 4,
                 slack: int = RATE // 2) -> list[tuple[float, int]]:
    """For every 0.25 s piece of ``clip`` with speech in it: its best normalised correlation within
    ``slack`` samples of where it belongs in ``signal`` (``lag`` + its offset), and the shift found.
    Piecewise, because the fake capture device, starved of CPU on a loaded machine, can drop or
    repeat a few milliseconds of audio: the rest of the clip then sits a little earlier or later."""
    energy = [float(np.sum(clip[s:s + piece] ** 2)) for s in range(0, clip.size - piece + 1, piece)]
    out = []
    for k, e in enumerate(energy):
        if e < 0.1 * np.mean(energy):
            continue
        start = k * piece
        lo = max(0, lag + start - slack)
        region = signal[lo:lag + start + piece + slack]
        if region.size < piece:
            out.append((0.0, slack))
            continue
        at, c = best_alignment(region, clip[start:start + piece])
        out.append((c, lo + at - (lag + start)))
    return out


def best_alignment(signal: np.ndarray, clip: np.ndarray) -> tuple[int, float]:
    """The lag of ``clip`` in ``signal`` with the highest normalised cross-correlation, and that value."""
    n = 1 << int(np.ceil(np.log2(signal.size + clip.size)))
    corr = np.fft.irfft(np.fft.rfft(signal, n) * np.conj(np.fft.rfft(clip, n)), n)[: signal.size - clip.size + 1]
    energy = np.concatenate([[0.0], np.cumsum(signal ** 2)])
    window = energy[clip.size:] - energy[: signal.size - clip.size + 1]
    norm = corr / np.sqrt(np.maximum(window, 1e-12) * np.sum(clip ** 2))
    lag = int(np.argmax(norm))
    return lag, float(norm[lag])


@pytest.mark.parametrize("n", [6, pytest.param(20, marks=pytest.mark.slow)])
def test_pages_at_once_equal_alone(server, browser, reference, n) -> None:
    """``n`` pages upload together (their transcriptions queue on the server's transcription worker):
    every final transcript equals the CLI's on its file alone."""
    names = [LONG_CLIPS[i % min(n // 2, len(LONG_CLIPS))] for i in range(n)]
    pages = [open_page(browser, server.page_url) for _ in names]
    done = server.service.transcriber.done
    for page, name in zip(pages, names):
        page.set_input_files("#file", str(REAL / name))
    runs = [wait_done(page, 0, timeout_s=90) for page in pages]
    for name, run in zip(names, runs):
        assert run["error"] is None, run["error"]
        assert words_of(run["final"]) == words_of(reference[name]), name
    assert server.service.transcriber.done - done == n
    for page in pages:
        page.context.close()


# ------------------------------------------------------------------ refusals, through the CLI
@pytest.fixture(scope="module")
def small_server():
    """``asrdecode serve --max-streams 1 --max-stream-seconds 2 --max-upload-seconds 2`` on a free port (with
    room for the browser's parallel connections: by default the cap is twice --max-streams)."""
    cmd = [sys.executable, "-m", "asrdecode.cli", "serve", "--model", MODEL, "--decoder", DECODER, "--port", "0",
           "--max-streams", "1", "--max-connections", "16", "--max-stream-seconds", "2", "--max-upload-seconds", "2",
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        line = ""
        end = time.monotonic() + 60
        while not line.startswith("listening on ") and time.monotonic() < end:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "asrdecode serve exited before listening"
        match = re.search(r"^listening on (ws://\S+) .*; page (http://\S+/)$", line.strip())
        assert match, f"no page URL in the ready line: {line!r}"
        yield match.group(1), match.group(2)
    finally:
        proc.terminate()
        proc.wait(30)


def error_after(page, action) -> tuple[str, str | None]:
    """Runs ``action``, waits for the error line; returns its text and the run's error code. The previous
    error line is hidden first: else it could be read before the page cleared it for this action."""
    page.evaluate("() => { const e = document.getElementById('error'); e.hidden = true; e.textContent = ''; }")
    action()
    page.wait_for_function("() => { const e = document.getElementById('error'); "
                           "return !e.hidden && e.textContent !== '' && !window.asrPage.busy; }", timeout=30000)
    code = page.evaluate("window.asrPage.run && window.asrPage.run.errorCode")
    return page.inner_text("#error"), code


def test_the_page_shows_why_the_server_refused(small_server, browser, reference, tmp_path) -> None:
    stream_url, page_url = small_server
    page = open_page(browser, page_url)
    texts = page.evaluate("window.asrPage.ERROR_TEXT")

    # over capacity: another client holds the only stream; the microphone is refused, while a file
    # (decoded offline by POST /v1/audio/transcriptions, not a stream) goes through (1.96 s, under 2 s)
    with connect(stream_url, open_timeout=10) as held:
        held.send(json.dumps({"sample_rate": 16000}))
        assert json.loads(held.recv(timeout=10))["type"] == "ready"
        line, code = error_after(page, lambda: page.click("#mic-start"))
        assert code == "server_busy" and texts["server_busy"] in line and "1 streams are open" in line
        page.wait_for_function("!window.asrPage.busy")
        run = wait_done(page, upload(page, REAL / "cards-002.wav"))
        assert run["error"] is None and words_of(run["final"]) == words_of(reference["cards-002.wav"])
        assert page.is_hidden("#error")

    # bad audio: longer than the server allows (3.5 s > --max-upload-seconds 2), NaN samples
    line, code = error_after(page, lambda: upload(page, REAL / "cards-005.wav"))
    assert code == "audio_too_long" and texts["audio_too_long"] in line and "at most 2 s" in line
    assert page.locator(".word").count() == 0
    nan = np.zeros(8000, np.float32)
    nan[4000] = np.nan
    line, code = error_after(page, lambda: upload(page, float_wav(tmp_path / "nan.wav", nan)))
    assert code == "invalid_file" and texts["invalid_file"] in line and "NaN" in line

    # files the page cannot read never reach the server
    (tmp_path / "notes.wav").write_text("these are not samples")
    line, _ = error_after(page, lambda: upload(page, tmp_path / "notes.wav"))
    assert line == "notes.wav: not a WAV file, and this browser cannot decode it as audio"
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x04\x00\x00\x00WAVE")
    line, _ = error_after(page, lambda: upload(page, tmp_path / "broken.wav"))
    assert line == "broken.wav: WAV file without a fmt chunk"
    assert page.page_errors == []


def test_screenshot(server, browser, reference, tmp_path) -> None:
    """The picture in docs/serving.md: a file's final transcript with its word times.
    ``ASRDECODE_DOCS_SCREENSHOT=1`` writes it to docs/browser-page.png."""
    page = open_page(browser, server.page_url)
    page.set_viewport_size({"width": 900, "height": 400})
    name = "librivox-sense_and_sensibility_01_austen_64kb-0880.wav"
    run = wait_done(page, upload(page, REAL / name))
    assert page.inner_text("#partial") == run["final"]["text"] == reference[name]["text"]
    out = ROOT / "docs" / "browser-page.png" if os.environ.get("ASRDECODE_DOCS_SCREENSHOT") else tmp_path / "page.png"
    page.screenshot(path=str(out))
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (900, 400)
