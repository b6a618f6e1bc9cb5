"""``POST /v1/audio/transcriptions`` through OpenAI's own Python client: the text equals ``asrdecode
transcribe``'s (the default model, phone-ctc + its TLG), the response formats (subtitles too), word and
segment times, and OpenAI-shaped errors with their HTTP codes."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("python_multipart")
openai = pytest.importorskip("openai")

from asrdecode import cli  # noqa: E402
from asrdecode.serving.server import ServerConfig, ServerThread, build_service  # noqa: E402
from asrdecode.serving.transcriptions import TranscriptionConfig, segments_of  # noqa: E402

pytestmark = pytest.mark.timeout(300)

REAL = Path(__file__).resolve().parents[2] / "data" / "real"
ALL_CLIPS = sorted(REAL.glob("*.wav"))
FAST_CLIPS = [REAL / "cards-001.wav", REAL / "librivox-sense_and_sensibility_01_austen_64kb-0890.wav"]
MODEL = "phone-ctc"


@pytest.fixture(scope="module")
def server():
    service = build_service(ServerConfig(model=MODEL, warmup_seconds=0.0),
                            transcriptions=TranscriptionConfig(max_upload_mb=2.0, max_audio_seconds=20.0))
    with ServerThread(service) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://{server.host}:{server.port}/v1", api_key="not-needed", max_retries=0,
                         timeout=120)


def cli_records(paths: list[Path], capsys) -> dict[str, dict]:
    assert cli.main(["transcribe", *map(str, paths), "--model", MODEL, "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    return {Path(r["audio"]).name: r for r in (recs if isinstance(recs, list) else [recs])}


def test_text_equals_transcribe_on_every_real_clip(client, capsys) -> None:
    """Every data/real clip (about 10 s for both decodings on one core, so not a slow test)."""
    want = cli_records(ALL_CLIPS, capsys)
    assert len(ALL_CLIPS) == 10
    for p in ALL_CLIPS:
        with open(p, "rb") as f:
            got = client.audio.transcriptions.create(model=MODEL, file=f)
        assert got.text == want[p.name]["text"], p.name


def test_verbose_json_words_and_segments(client, capsys) -> None:
    path = FAST_CLIPS[1]
    want = cli_records([path], capsys)[path.name]
    with open(path, "rb") as f:
        got = client.audio.transcriptions.create(model=MODEL, file=f, response_format="verbose_json",
                                                 timestamp_granularities=["word", "segment"], language="en")
    assert got.text == want["text"] and got.language == "english"
    with wave.open(str(path)) as w:
        assert got.duration == pytest.approx(w.getnframes() / w.getframerate(), abs=1e-3)
    assert [(w.word, w.start, w.end) for w in got.words] == [(w["word"], w["start"], w["end"]) for w in want["words"]]
    assert got.segments and " ".join(s.text for s in got.segments) == got.text
    assert got.segments[0].start == got.words[0].start and got.segments[-1].end == got.words[-1].end
    assert sum(len(s.tokens) for s in got.segments) == len(want["tokens"])
    with open(path, "rb") as f:  # segments only (the default granularity): no words
        seg_only = client.audio.transcriptions.create(model=MODEL, file=f, response_format="verbose_json")
    assert seg_only.words is None and seg_only.segments


def test_text_format(client, capsys) -> None:
    path = FAST_CLIPS[0]
    with open(path, "rb") as f:
        got = client.audio.transcriptions.create(model=MODEL, file=f, response_format="text")
    assert got.strip() == cli_records([path], capsys)[path.name]["text"]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_equal_transcribe_s(client, fmt, tmp_path, capsys) -> None:
    path = FAST_CLIPS[1]
    with open(path, "rb") as f:
        got = client.audio.transcriptions.create(model=MODEL, file=f, response_format=fmt)
    assert cli.main(["transcribe", str(path), "--model", MODEL, "--format", fmt, "-o", str(tmp_path)]) == 0
    want = (tmp_path / f"{path.stem}.{fmt}").read_text(encoding="utf-8")
    assert got == want and want.count(" --> ") >= 1
    assert want.startswith("WEBVTT\n\n00:00:") if fmt == "vtt" else want.startswith("1\n00:00:")


def test_segments_split_at_pauses() -> None:
    words = [{"word": "a", "start": 0.0, "end": 0.3}, {"word": "b", "start": 0.5, "end": 0.9},
             {"word": "c", "start": 2.5, "end": 2.8}]
    tokens = [{"id": 1, "start": 0.0}, {"id": 2, "start": 0.5}, {"id": 3, "start": 2.5}]
    segs = segments_of(words, tokens, -0.5)
    assert [(s["text"], s["start"], s["end"], s["tokens"]) for s in segs] == [("a b", 0.0, 0.9, [1, 2]),
                                                                            ("c", 2.5, 2.8, [3])]
    assert segments_of([], [], 0.0) == []
    exact = [{"word": "a", "start": 1.0, "end": 1.3}, {"word": "b", "start": 2.3, "end": 2.5}]  # 2.3 - 1.3 < 1.0
    assert [s["text"] for s in segments_of(exact, [], 0.0)] == ["a", "b"]  # in floats: a pause of exactly 1 s


def test_errors_in_openai_shape(client, server, tmp_path) -> None:
    clip = FAST_CLIPS[0]
    with open(clip, "rb") as f, pytest.raises(openai.NotFoundError) as err:
        client.audio.transcriptions.create(model="whisper-1", file=f)
    assert err.value.status_code == 404 and err.value.code == "model_not_found" and "phone-ctc" in err.value.message
    with open(clip, "rb") as f, pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=f, response_format="diarized_json")
    assert err.value.param == "response_format" and "srt, vtt" in err.value.message
    with open(clip, "rb") as f, pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=f, language="fr")
    assert err.value.param == "language"
    with open(clip, "rb") as f, pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=f, timestamp_granularities=["word"])
    assert err.value.param == "timestamp_granularities[]"  # needs verbose_json
    notes = tmp_path / "notes.wav"
    notes.write_text("not audio")
    with open(notes, "rb") as f, pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=f)
    assert err.value.param == "file" and "notes.wav" in err.value.message and str(tmp_path) not in err.value.message
    nan = io.BytesIO()
    sf.write(nan, np.array([0.0, np.nan] * 800, np.float32), 16000, format="WAV", subtype="FLOAT")
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=("nan.wav", nan.getvalue()))
    assert err.value.param == "file" and err.value.code == "invalid_file" and "nan.wav: the audio contains NaN" in err.value.message
    big = io.BytesIO(np.zeros(3_000_000, np.uint8).tobytes())
    with pytest.raises(openai.APIStatusError) as err:
        client.audio.transcriptions.create(model=MODEL, file=("big.wav", big))
    assert err.value.status_code == 413
    long = tmp_path / "long.wav"
    with wave.open(str(long), "wb") as w:  # 25 s of silence: over max_audio_seconds (20), under 2 MB
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(16000)
        w.writeframes(bytes([128]) * 16000 * 25)
    with open(long, "rb") as f, pytest.raises(openai.APIStatusError) as err:
        client.audio.transcriptions.create(model=MODEL, file=f)
    assert err.value.status_code == 413 and err.value.code == "audio_too_long"
    # not multipart: 415, the same error shape
    req = urllib.request.Request(f"http://{server.host}:{server.port}/v1/audio/transcriptions", data=b"{}",
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(req, timeout=30)
    assert http.value.code == 415
    body = json.loads(http.value.read())
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["type"] == "invalid_request_error"


def test_info_shows_resolved_options_and_latency(server) -> None:
    """``/v1/info``: the options the decoder runs with (phone-ctc's tuned WFST search; the graph by its
    file name only), the transcription path and the stream latency in force."""
    with urllib.request.urlopen(f"http://{server.host}:{server.port}/v1/info", timeout=30) as r:
        info = json.loads(r.read())
    opts = info["decoder_options"]
    assert info["decoder"] == "wfst"
    assert (opts["acoustic_scale"], opts["wfst_beam"], opts["max_active"]) == (1.2, 12.0, 2000)
    assert opts["graph"].endswith(".pt") and "/" not in opts["graph"]
    assert info["transcriptions_path"] == "/v1/audio/transcriptions"
    front = server.service.decoder.front
    shape = info["stream_front_end"]
    lookahead = front.right_context * front.samples_per_frame / 16000
    assert shape["lookahead_seconds"] == pytest.approx(lookahead)
    assert shape["block_seconds"] == pytest.approx(front.block_frames * front.samples_per_frame / 16000)
    # the latency in force: block + lookahead of the streams that name none (phone-ctc's default 1.6 s)
    assert info["latency_seconds"] == pytest.approx(server.service.decoder.latency_info()["latency"])
    assert info["latency_seconds"] == pytest.approx(1.6)


def test_long_files_go_through_the_windowed_path_as_in_transcribe(server, client, capsys, monkeypatch) -> None:
    """With the threshold under the clip's length, both doors take the long-file path: the same text."""
    from dataclasses import replace

    transcriber = server.service.transcriber
    monkeypatch.setattr(transcriber, "config", replace(transcriber.config, long_audio_seconds=2.0))
    path = FAST_CLIPS[1]
    assert cli.main(["transcribe", str(path), "--model", MODEL, "--long-audio-seconds", "2", "--format", "json"]) == 0
    want = json.loads(capsys.readouterr().out)
    with open(path, "rb") as f:
        got = client.audio.transcriptions.create(model=MODEL, file=f, response_format="verbose_json",
                                                 timestamp_granularities=["word"])
    assert got.text == want["text"] and [w.word for w in got.words] == [w["word"] for w in want["words"]]


def test_serve_refuses_bad_upload_limits(capsys) -> None:
    assert cli.main(["serve", "--max-upload-mb", "0"]) == 2
    assert "max_upload_mb" in capsys.readouterr().err
