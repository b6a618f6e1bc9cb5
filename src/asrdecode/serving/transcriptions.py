"""``POST /v1/audio/transcriptions``: a whole file decoded offline, in OpenAI's audio API shape.

The request is ``multipart/form-data`` as OpenAI's ``audio.transcriptions.create`` sends it:

- ``file`` (required): the audio (WAV; FLAC / OGG / MP3 / float WAV with ``soundfile``), any sample
  rate (resampled to 16 kHz), mixed to mono;
- ``model`` (required): the served model's name (``/v1/info``'s ``model``); another name is a 404
  ``model_not_found``;
- ``language`` (optional): ``en`` / ``english`` (the bundled models are English);
- ``response_format``: ``json`` (default: ``{"text": ...}``), ``text`` (the text, ``text/plain``),
  ``verbose_json`` (``task``, ``language``, ``duration``, ``text``, ``segments`` and, with
  ``timestamp_granularities[]=word``, ``words`` with their start and end in seconds), ``srt`` or ``vtt``
  (subtitles from the word times, as ``asrdecode transcribe --format srt|vtt`` writes them:
  :func:`asrdecode.records.subtitle_cues`);
- ``timestamp_granularities[]``: ``segment`` (the default) and / or ``word``; needs ``verbose_json``;
- ``prompt`` and ``temperature`` are accepted and have no effect (the decoders are deterministic
  and take no prompt); ``stream=true`` is refused (this endpoint answers once).

The text is exactly what ``asrdecode transcribe FILE`` gives with the server's model and decoding
options (the same option resolution, :func:`~asrdecode.long_audio.decode_files`; files longer than
``long_audio_seconds`` go through the windowed long-file path). Segments are the runs of words
separated by less than :data:`SEGMENT_GAP_SECONDS` of silence (``avg_logprob``: the hypothesis's
score per token; ``temperature`` and ``no_speech_prob`` 0: greedy-like deterministic decoding, and a
segment holds recognised words only).

Errors are OpenAI's error JSON ``{"error": {"message", "type", "param", "code"}}`` with HTTP 400 (a
bad field, unreadable audio or NaN / infinite samples), 404 (another model), 413 (a file over ``max_upload_mb`` or longer than
``max_audio_seconds``), 415 (not multipart), 503 (too many transcriptions waiting, or shutting down)
and 500 (a decoding failure). Transcriptions run one at a time on their own worker thread (the
streams' batcher is not held up); the offline pipeline (the model's graph or LM) is built at the
first request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..errors import AsrDecodeError, DecodingInputError, check_number
from ..records import SUBTITLE_FORMATS, format_records, hypothesis_record
from .settings import TranscriptionConfig

__all__ = ["TRANSCRIPTIONS_PATH", "ERROR_CODES", "TranscriptionConfig", "Transcriber", "ApiError", "transcription_routes",
           "segments_of", "SEGMENT_GAP_SECONDS"]

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
#: a pause between two words at least this long starts a new segment of ``verbose_json``
SEGMENT_GAP_SECONDS = 1.0
RESPONSE_FORMATS = ("json", "text", "verbose_json", *SUBTITLE_FORMATS)
#: the media types of the subtitle formats (WebVTT's is registered; SRT has none, so plain text)
_SUBTITLE_MEDIA = {"srt": "text/plain", "vtt": "text/vtt"}
GRANULARITIES = ("segment", "word")
LANGUAGES = {"en": "english", "english": "english"}
#: every ``code`` of this endpoint's errors (the page has a line for each: static/errors.js)
ERROR_CODES = ("model_not_found", "unsupported_value", "unsupported_language", "file_too_large", "audio_too_long",
               "invalid_file", "server_busy", "shutting_down")


class ApiError(Exception):
    """An error answered in OpenAI's shape: HTTP ``status``, ``type``, ``param``, ``code``."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        """The error as OpenAI's error JSON."""
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


class Transcriber:
    """Decodes whole files of ``bundle`` with ``options`` (resolved :class:`~asrdecode.pipeline.DecodeOptions`),
    one at a time on a worker thread; :meth:`transcribe` is the blocking call."""

    def __init__(self, bundle: Any, options: Any, name: str, config: Optional[TranscriptionConfig] = None) -> None:
        self.bundle, self.options, self.name, self.config = bundle, options, name, config or TranscriptionConfig()
        self._pipeline: Any = None
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="asrdecode-transcribe")
        self.waiting = 0
        self.done = 0

    def pipeline(self) -> Any:
        """The offline pipeline (built once, on first use)."""
        with self._lock:
            if self._pipeline is None:
                from ..pipeline import make_pipeline

                self._pipeline = make_pipeline(self.bundle, self.options)
            return self._pipeline

    def transcribe(self, wave: Any) -> Any:
        """The best :class:`~asrdecode.results.Hypothesis` of ``wave [N]`` (16 kHz), as ``transcribe`` gives it."""
        import torch

        from ..long_audio import decode_files

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1") or 1)))
        (hyps,) = decode_files(self.bundle, self.pipeline(), [wave], 1,
                               long_audio_seconds=self.config.long_audio_seconds)
        return hyps[0]

    async def run(self, wave: Any) -> Any:
        """:meth:`transcribe` on the worker thread; 503 when ``max_waiting`` are running or waiting."""
        if self.waiting >= self.config.max_waiting:
            raise ApiError(503, f"{self.waiting} transcriptions are running or waiting; try again later",
                           code="server_busy", kind="server_error")
        self.waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self.transcribe, wave)
        finally:
            self.waiting -= 1
            self.done += 1

    def close(self) -> None:
        """Stop the worker thread (waiting transcriptions finish first)."""
        self._pool.shutdown(wait=True)


def segments_of(words: list[dict[str, Any]], tokens: list[dict[str, Any]], score_per_token: float,
                gap: float = SEGMENT_GAP_SECONDS) -> list[dict[str, Any]]:
    """``verbose_json`` segments: runs of ``words`` (``{"word", "start", "end"}``, seconds) split where a
    pause of at least ``gap`` seconds separates two words, with the ids of the ``tokens`` (``{"id",
    "start"}``) that start inside each; ``avg_logprob`` is the hypothesis's score per token."""
    runs: list[list[dict[str, Any]]] = []
    for w in words:  # in whole milliseconds, as subtitle cues: float rounding must not join a pause of ``gap``
        if not runs or round(w["start"] * 1000) - round(runs[-1][-1]["end"] * 1000) >= round(gap * 1000):
            runs.append([w])
        else:
            runs[-1].append(w)
    out = []
    for k, run in enumerate(runs):
        start, end = run[0]["start"], run[-1]["end"]
        nxt = runs[k + 1][0]["start"] if k + 1 < len(runs) else math.inf
        text = " ".join(w["word"] for w in run)
        ids = [t["id"] for t in tokens if (start if k else -math.inf) <= t["start"] < nxt]
        raw = text.encode("utf-8")
        out.append({"id": k, "seek": int(round(start * 100)), "start": start, "end": end, "text": text, "tokens": ids,
                    "temperature": 0.0, "avg_logprob": score_per_token,
                    "compression_ratio": round(len(raw) / len(zlib.compress(raw)), 4) if raw else 0.0,
                    "no_speech_prob": 0.0})  # a segment is made of recognised words only
    return out


def _field(form: Any, name: str) -> Optional[str]:
    """A text field of the form (``None`` if absent); a file where text is expected is a 400."""
    value = form.get(name)
    if value is None or isinstance(value, str):
        return value
    raise ApiError(400, f"'{name}' must be a text field, not a file", param=name)


def _check_fields(form: Any, served: str) -> tuple[str, Optional[str], set[str]]:
    """``(response_format, language name, granularities)`` of the form, or an :class:`ApiError`."""
    model = _field(form, "model")
    if not model:
        raise ApiError(400, "you must provide a model parameter (the served model: see /v1/info)", param="model")
    if model != served:
        raise ApiError(404, f"the model '{model}' is not served here; this server serves '{served}'",
                       param="model", code="model_not_found")
    fmt = _field(form, "response_format") or "json"
    if fmt not in RESPONSE_FORMATS:
        raise ApiError(400, f"response_format '{fmt}' is not supported; use one of {', '.join(RESPONSE_FORMATS)}",
                       param="response_format", code="unsupported_value")
    lang = _field(form, "language")
    if lang and lang.strip().lower() not in LANGUAGES:
        raise ApiError(400, f"language '{lang}' is not supported: the model transcribes English ('en')",
                       param="language", code="unsupported_language")
    grains = [g for key in ("timestamp_granularities[]", "timestamp_granularities") for g in form.getlist(key)]
    for g in grains:
        if g not in GRANULARITIES:
            raise ApiError(400, f"timestamp_granularities[] '{g}' is not one of {', '.join(GRANULARITIES)}",
                           param="timestamp_granularities[]", code="unsupported_value")
    if grains and fmt != "verbose_json":
        raise ApiError(400, "timestamp_granularities[] needs response_format 'verbose_json'",
                       param="timestamp_granularities[]")
    if (_field(form, "stream") or "false").lower() == "true":
        raise ApiError(400, "stream=true is not supported: the transcription is returned whole", param="stream",
                       code="unsupported_value")
    temperature = _field(form, "temperature")
    if temperature is not None:
        try:
            check_number("temperature", float(temperature), low=0, high=1)
        except (ValueError, DecodingInputError):
            raise ApiError(400, f"temperature must be a number in [0, 1], got {temperature!r}", param="temperature") from None
    return fmt, LANGUAGES[lang.strip().lower()] if lang else None, set(grains) or {"segment"}


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it is over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request is larger than {limit / 1e6:g} MB", param="file", code="file_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request is larger than {limit / 1e6:g} MB", param="file", code="file_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _read_upload(data: bytes, filename: str, max_seconds: float) -> Any:
    """The uploaded audio as a 16 kHz wave ``[N]`` (400 when it is not audio we can read)."""
    from ..audio import SAMPLE_RATE, read_audio

    suffix = Path(filename).suffix if Path(filename).suffix.isascii() and len(Path(filename).suffix) <= 8 else ""
    with tempfile.TemporaryDirectory(prefix="asrdecode-upload-") as tmp:
        path = Path(tmp) / f"upload{suffix or '.wav'}"
        path.write_bytes(data)
        try:
            wave = read_audio(path)
        except (AsrDecodeError, OSError, ValueError) as err:
            message = str(err).replace(str(path), filename or "file")
            raise ApiError(400, f"could not read the audio: {message}", param="file", code="invalid_file") from None
    if wave.numel() > max_seconds * SAMPLE_RATE:
        raise ApiError(413, f"the audio is {wave.numel() / SAMPLE_RATE:.1f} s long; at most {max_seconds:g} s",
                       param="file", code="audio_too_long")
    return wave


def _response(hyp: Any, transcriber: Transcriber, fmt: str, language: Optional[str], grains: set[str],
              seconds: float) -> Response:
    bundle = transcriber.bundle
    rec = hypothesis_record(hyp, bundle.tokenizer, bundle.frame_seconds, "")
    text = rec["text"]
    if fmt == "text":
        return PlainTextResponse(text + "\n")
    if fmt == "json":
        return JSONResponse({"text": text})
    if fmt in SUBTITLE_FORMATS:
        return PlainTextResponse(format_records([rec], fmt), media_type=_SUBTITLE_MEDIA[fmt])
    words = rec.get("words") or []
    body: dict[str, Any] = {"task": "transcribe", "language": language or "english", "duration": round(seconds, 3),
                            "text": text}
    if "segment" in grains:
        body["segments"] = segments_of(words, rec["tokens"], float(hyp.score) / max(1, len(hyp.tokens)))
    if "word" in grains:
        body["words"] = words
    return JSONResponse(body)


def transcription_routes(service: Any) -> list:
    """The route of ``POST /v1/audio/transcriptions`` for ``service`` (its ``transcriber`` decodes)."""

    async def transcriptions(request: Request) -> Response:
        transcriber: Transcriber = service.transcriber
        try:
            if getattr(service, "draining", False):
                raise ApiError(503, "the server is shutting down", code="shutting_down", kind="server_error")
            if not request.headers.get("content-type", "").startswith("multipart/form-data"):
                raise ApiError(415, "the request must be multipart/form-data with the audio in 'file'")
            limit = int(transcriber.config.max_upload_mb * 1e6)
            request._body = await _read_body(request, limit)  # form() then parses these bytes
            try:
                form = await request.form(max_files=1, max_fields=32, max_part_size=limit)
            except Exception as err:  # starlette raises its own types for malformed multipart bodies
                raise ApiError(400, f"malformed multipart body: {err}") from None
            try:
                fmt, language, grains = _check_fields(form, transcriber.name)
                upload = form.get("file")
                if upload is None or isinstance(upload, str):
                    raise ApiError(400, "you must provide the audio as a file in the 'file' field", param="file")
                data = await upload.read()
                wave = _read_upload(data, upload.filename or "", transcriber.config.max_audio_seconds)
            finally:
                await form.close()
            try:
                hyp = await transcriber.run(wave)
            except ApiError:
                raise
            except DecodingInputError as err:
                raise ApiError(400, f"the decoder refused the audio: {err}", param="file") from None
            except Exception as err:
                raise ApiError(500, f"decoding failed: {type(err).__name__}: {err}", kind="server_error") from None
            from ..audio import SAMPLE_RATE

            return _response(hyp, transcriber, fmt, language, grains, wave.numel() / SAMPLE_RATE)
        except ApiError as err:
            return err.response()

    return [Route(TRANSCRIPTIONS_PATH, transcriptions, methods=["POST"])]
