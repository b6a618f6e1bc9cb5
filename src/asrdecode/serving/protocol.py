"""The wire protocol of ``asrdecode serve``: message formats, limits and their checks.

One WebSocket connection carries one audio stream (path ``/v1/stream``):

1. client -> server, one **text** message, the stream's configuration (JSON object)::

       {"sample_rate": 16000, "encoding": "s16le", "boosts": {"sense and sensibility": 2.0}, "name": "clip-7",
        "latency": 1.2}

   ``sample_rate`` is required and must be 16000. ``encoding`` is ``"s16le"`` (default:
   little-endian signed 16-bit PCM) or ``"f32le"`` (little-endian float32 in [-1, 1]).
   ``boosts`` (optional) maps a phrase (a word for the WFST decoder) to its boost weight;
   ``name`` (optional) is echoed back. ``latency`` (optional, seconds, a number in
   [``MIN_LATENCY_SECONDS``, ``MAX_LATENCY_SECONDS``]) is this stream's latency
   (:mod:`asrdecode.streaming.latency`; default: the server's ``--latency``, else the model's
   default); a bad one is ``bad_latency``. Unknown keys are an error (a typo is not silently
   ignored).
2. server -> client ``{"type": "ready", "stream_id": ..., "sample_rate": 16000, "encoding": ...,
   "max_chunk_bytes": ..., "frame_seconds": ..., "latency": {...}}`` (``latency``: the latency in
   force, its block / left / right in seconds, where the decoder reports it).
3. client -> server, any number of **binary** messages, each a chunk of mono PCM in the
   configured encoding (a whole number of samples, at most ``max_chunk_bytes``, any length).
4. client -> server, one **text** message ``{"type": "end"}``: the audio is complete.
5. server -> client, for every chunk in order, ``{"type": "partial", "seq": k, "text": ...,
   "frames": ..., "queue_ms": ..., "compute_ms": ..., "batch": ...}`` (``seq`` counts chunks
   from 0); after ``end``, one ``{"type": "final", ...}`` with the same fields plus ``words``
   (``[{"word", "start", "end"}]`` in seconds) and ``audio_seconds``. The server then closes
   the connection (code 1000).

Any violation (not JSON, unknown message, wrong sample rate, binary before the
configuration, a chunk too large or not a whole number of samples, NaN / inf samples or float
samples beyond ``max_abs_sample``, a stream longer than ``max_stream_seconds``, idle for
``idle_timeout_s``, sending less than ``min_audio_rate`` seconds of audio per second) gets one
``{"type": "error", "code": ..., "message": ...}`` and the server closes *that* connection with
the WebSocket code in :data:`CLOSE_CODES`; other streams are not affected.
"""

from __future__ import annotations

import collections
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from ..configs import setting
from ..errors import check_int, check_number
from ..streaming.latency import MAX_LATENCY_SECONDS, MIN_LATENCY_SECONDS, LatencyError, check_latency

__all__ = [
    "SAMPLE_RATE", "ENCODINGS", "CLOSE_CODES", "Limits", "StreamConfig", "ProtocolError",
    "parse_config", "parse_latency", "parse_control", "MIN_LATENCY_SECONDS", "MAX_LATENCY_SECONDS",
    "decode_chunk", "encode_chunk", "error_message", "AudioRateMeter",
    "MAX_CHUNK_SECONDS_CEILING", "MAX_TEXT_BYTES_CEILING", "MAX_ABS_SAMPLE_CEILING",
]

SAMPLE_RATE = 16000
#: ``asrdecode.streaming.MAX_ABS_SAMPLE`` (kept here so that this module needs numpy only)
MAX_ABS_SAMPLE_CEILING = 1000.0
ENCODINGS: dict[str, np.dtype] = {"s16le": np.dtype("<i2"), "f32le": np.dtype("<f4")}

# error code -> WebSocket close code (RFC 6455 section 7.4.1)
CLOSE_CODES = {
    "bad_config": 1008,         # policy violation
    "bad_sample_rate": 1003,    # unsupported data
    "bad_encoding": 1003,
    "bad_boosts": 1008,
    "bad_latency": 1008,        # not a number of seconds in range
    "bad_message": 1008,
    "unexpected_binary": 1008,
    "bad_chunk": 1007,          # inconsistent data (odd byte count, NaN / inf, samples out of range)
    "bad_audio": 1007,          # the decoder refused the stream's audio
    "chunk_too_large": 1009,    # message too big
    "message_too_large": 1009,
    "stream_too_long": 1009,
    "idle_timeout": 1008,
    "too_slow": 1008,           # less audio per second than min_audio_rate (slow-drip clients)
    "server_busy": 1013,        # try again later
    "shutting_down": 1001,      # going away
    "internal": 1011,
}


class ProtocolError(ValueError):
    """A client broke the protocol: ``code`` is a key of :data:`CLOSE_CODES`."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CLOSE_CODES:
            raise KeyError(f"unknown protocol error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def close_code(self) -> int:
        return CLOSE_CODES[self.code]


#: ceilings of the limits that set how much one message may hold (the WebSocket layer reads up
#: to four times the largest legal message into memory before it can refuse it)
MAX_CHUNK_SECONDS_CEILING = 30.0
MAX_TEXT_BYTES_CEILING = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Per-stream limits the server enforces (``docs/serving.md`` names the attack each answers).

    Attributes:
        max_chunk_seconds: longest audio chunk (one binary message), in seconds; at most
            :data:`MAX_CHUNK_SECONDS_CEILING`.
        max_text_bytes: largest text (JSON) message; at most :data:`MAX_TEXT_BYTES_CEILING`.
        max_stream_seconds: longest stream, in seconds of audio.
        max_boosts: most boosted phrases per stream.
        max_phrase_chars: longest boosted phrase.
        max_boost_weight: largest absolute boost weight.
        max_abs_sample: largest ``|sample|`` of ``f32le`` audio (nominally in [-1, 1]; the
            headroom lets resampler overshoot through); at most the decoder's own bound.
        config_timeout_s: time allowed between connecting and the configuration message.
        idle_timeout_s: longest silence from the client while a stream is open.
        min_audio_rate: least audio, in seconds per second the server waited for the client,
            over the last ``rate_window_s`` seconds of waiting, once the stream has waited
            ``rate_grace_s`` seconds in all; 0 turns the check off. Time the server did not
            read the client (back-pressure: its chunks were queued) does not count.
        rate_window_s, rate_grace_s: the window and grace period of ``min_audio_rate``.
    """

    max_chunk_seconds: float = setting(2.0, f"largest audio message, in seconds (at most {MAX_CHUNK_SECONDS_CEILING:g})",
                                       cli=True)
    max_text_bytes: int = 65536
    max_stream_seconds: float = setting(600.0, "longest stream", cli=True)
    max_boosts: int = 256
    max_phrase_chars: int = 100
    max_boost_weight: float = 100.0
    max_abs_sample: float = 2.0
    config_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    min_audio_rate: float = setting(0.5, "close streams sending less audio than this many seconds per second, "
                                    "over 10 s after 10 s (0: off)", cli=True)
    rate_window_s: float = 10.0
    rate_grace_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_chunk_seconds", "max_stream_seconds", "max_boost_weight", "max_abs_sample",
                     "config_timeout_s", "idle_timeout_s", "rate_window_s", "rate_grace_s"):
            v = getattr(self, name)
            check_number(f"Limits.{name}", v, low=0, low_open=True, error=ValueError)
        for name in ("max_text_bytes", "max_boosts", "max_phrase_chars"):
            v = getattr(self, name)
            check_int(f"Limits.{name}", v, low=1, error=ValueError)
        check_number("Limits.min_audio_rate (0: no check)", self.min_audio_rate, low=0, error=ValueError)
        if self.max_chunk_seconds > MAX_CHUNK_SECONDS_CEILING:
            raise ValueError(f"Limits.max_chunk_seconds must be at most {MAX_CHUNK_SECONDS_CEILING:g} s, "
                             f"got {self.max_chunk_seconds!r}")
        if self.max_text_bytes > MAX_TEXT_BYTES_CEILING:
            raise ValueError(f"Limits.max_text_bytes must be at most {MAX_TEXT_BYTES_CEILING}, "
                             f"got {self.max_text_bytes!r}")
        if self.max_abs_sample > MAX_ABS_SAMPLE_CEILING:
            raise ValueError(f"Limits.max_abs_sample must be at most {MAX_ABS_SAMPLE_CEILING:g} (the decoder's "
                             f"bound), got {self.max_abs_sample!r}")

    def max_chunk_bytes(self, encoding: str) -> int:
        """Largest binary message for ``encoding``: ``max_chunk_seconds`` of samples."""
        return int(self.max_chunk_seconds * SAMPLE_RATE) * ENCODINGS[encoding].itemsize

    @property
    def transport_max_bytes(self) -> int:
        """The WebSocket layer's own cap: larger messages are cut off with code 1009 unread.

        Four times the largest legal message, so that anything up to that size is read and
        answered with a JSON ``chunk_too_large`` error instead.
        """
        return 4 * max(self.max_text_bytes, self.max_chunk_bytes("f32le"))


@dataclass(frozen=True)
class StreamConfig:
    """A parsed configuration message."""

    sample_rate: int = SAMPLE_RATE
    encoding: str = "s16le"
    boosts: Optional[dict[str, float]] = None
    name: Optional[str] = None
    latency: Optional[float] = None

    def to_json(self) -> str:
        msg: dict[str, Any] = {"sample_rate": self.sample_rate, "encoding": self.encoding}
        if self.boosts:
            msg["boosts"] = dict(self.boosts)
        if self.name is not None:
            msg["name"] = self.name
        if self.latency is not None:
            msg["latency"] = self.latency
        return json.dumps(msg, ensure_ascii=False)


def _json_object(text: str, limits: Limits, what: str) -> dict[str, Any]:
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_text_bytes:
        raise ProtocolError("message_too_large", f"{what}: text message larger than {limits.max_text_bytes} bytes")
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, or an integer of over 4300 digits
        raise ProtocolError("bad_config" if what == "configuration" else "bad_message",
                            f"{what}: not valid JSON ({err})") from None
    if not isinstance(msg, dict):
        raise ProtocolError("bad_config" if what == "configuration" else "bad_message",
                            f"{what}: expected a JSON object, got {type(msg).__name__}")
    return msg


def parse_config(text: str, limits: Limits) -> StreamConfig:
    """Check the first (configuration) message of a stream; raise :class:`ProtocolError` if bad."""
    msg = _json_object(text, limits, "configuration")
    unknown = sorted(set(msg) - {"sample_rate", "encoding", "boosts", "name", "latency"})
    if unknown:
        raise ProtocolError("bad_config", f"configuration: unknown keys {unknown} "
                            "(expected sample_rate, encoding, boosts, name, latency)")
    if "sample_rate" not in msg:
        raise ProtocolError("bad_config", "configuration: 'sample_rate' is required")
    sr = msg["sample_rate"]
    if isinstance(sr, bool) or not isinstance(sr, int) or sr != SAMPLE_RATE:
        raise ProtocolError("bad_sample_rate", f"configuration: sample_rate must be {SAMPLE_RATE}, got {sr!r}")
    enc = msg.get("encoding", "s16le")
    if not isinstance(enc, str) or enc not in ENCODINGS:
        raise ProtocolError("bad_encoding", f"configuration: encoding must be one of {sorted(ENCODINGS)}, got {enc!r}")
    name = msg.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        raise ProtocolError("bad_config", "configuration: name must be a string of at most 200 characters")
    boosts = msg.get("boosts")
    if boosts is not None:
        boosts = _check_boosts(boosts, limits)
    latency = parse_latency(msg["latency"]) if msg.get("latency") is not None else None
    return StreamConfig(sample_rate=sr, encoding=enc, boosts=boosts or None, name=name, latency=latency)


def parse_latency(value: Any) -> float:
    """A configuration's ``latency``: a number of seconds in [:data:`MIN_LATENCY_SECONDS`,
    :data:`MAX_LATENCY_SECONDS`]; :class:`ProtocolError` ``bad_latency`` otherwise."""
    try:
        return check_latency("configuration: latency", value)
    except LatencyError as err:
        raise ProtocolError("bad_latency", str(err)) from None


def _check_boosts(boosts: Any, limits: Limits) -> dict[str, float]:
    if not isinstance(boosts, dict):
        raise ProtocolError("bad_boosts", "configuration: boosts must be an object {phrase: weight}")
    if len(boosts) > limits.max_boosts:
        raise ProtocolError("bad_boosts", f"configuration: at most {limits.max_boosts} boosts, got {len(boosts)}")
    out: dict[str, float] = {}
    for phrase, w in boosts.items():
        p = " ".join(phrase.split())
        if not p or len(p) > limits.max_phrase_chars:
            raise ProtocolError("bad_boosts", f"configuration: boost phrase {phrase!r} must be 1 to "
                                f"{limits.max_phrase_chars} characters")
        check_number(f"configuration: boost weight of {phrase!r}", w, low=-limits.max_boost_weight,
                     high=limits.max_boost_weight, error=lambda message: ProtocolError("bad_boosts", message))
        out[p] = float(w)
    return out


def parse_control(text: str, limits: Limits) -> str:
    """A text message after the configuration: returns its ``type`` (only ``"end"`` is defined)."""
    msg = _json_object(text, limits, "control message")
    if msg.get("type") != "end" or len(msg) != 1:
        raise ProtocolError("bad_message", f"expected {{\"type\": \"end\"}} or binary audio, got {text[:100]!r}")
    return "end"


def decode_chunk(data: bytes, encoding: str, limits: Limits) -> np.ndarray:
    """A binary message -> 1-D float32 samples in [-1, 1]; raise :class:`ProtocolError` if bad."""
    dtype = ENCODINGS[encoding]
    cap = limits.max_chunk_bytes(encoding)
    if len(data) > cap:
        raise ProtocolError("chunk_too_large", f"audio chunk of {len(data)} bytes is larger than {cap} bytes "
                            f"({limits.max_chunk_seconds:g} s of {encoding})")
    if len(data) % dtype.itemsize:
        raise ProtocolError("bad_chunk", f"audio chunk of {len(data)} bytes is not a whole number of "
                            f"{dtype.itemsize}-byte {encoding} samples")
    x = np.frombuffer(data, dtype=dtype)
    if encoding == "s16le":
        return x.astype(np.float32) / 32768.0
    if not np.isfinite(x).all():
        raise ProtocolError("bad_chunk", "audio chunk holds NaN or inf samples")
    peak = float(np.abs(x).max()) if x.size else 0.0
    if peak > limits.max_abs_sample:
        raise ProtocolError("bad_chunk", f"audio chunk holds samples of magnitude {peak:.3g}; f32le audio must lie in "
                            f"[-1, 1] (at most {limits.max_abs_sample:g} accepted)")
    return x.astype(np.float32)


def encode_chunk(samples: np.ndarray, encoding: str = "s16le") -> bytes:
    """Float samples in [-1, 1] -> a binary message (the client side of :func:`decode_chunk`)."""
    x = np.asarray(samples, dtype=np.float32)
    if encoding == "s16le":
        return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2").tobytes()
    if encoding == "f32le":
        return x.astype("<f4").tobytes()
    raise ValueError(f"encoding must be one of {sorted(ENCODINGS)}, got {encoding!r}")


def error_message(code: str, message: str, **extra: Any) -> str:
    """The JSON text of an error message."""
    return json.dumps({"type": "error", "code": code, "message": message, **extra}, ensure_ascii=False)


def result_message(kind: str, fields: Mapping[str, Any]) -> str:
    """The JSON text of a ``partial`` or ``final`` message."""
    return json.dumps({"type": kind, **fields}, ensure_ascii=False)


class AudioRateMeter:
    """A stream's data rate: seconds of audio received per second the server waited for the client.

    The server credits :meth:`waited` with the time it spent waiting for the client's next
    message (not the time it did not read it because of back-pressure) and :meth:`received` with
    each chunk's samples. :meth:`check` raises ``too_slow`` once ``limits.rate_grace_s`` seconds of
    waiting have passed and the audio of the last ``limits.rate_window_s`` seconds of waiting is
    less than ``limits.min_audio_rate`` times that span. With ``min_audio_rate == 0`` it never raises.
    """

    def __init__(self, limits: Limits) -> None:
        self.min_rate = float(limits.min_audio_rate)
        self.window = float(limits.rate_window_s)
        self.grace = float(limits.rate_grace_s)
        self.clock = 0.0                       # seconds spent waiting for this client
        self.samples = 0                       # samples received
        self._marks: collections.deque[tuple[float, int]] = collections.deque()  # (clock, samples so far)
        self._base = 0                         # samples received before the window

    def waited(self, seconds: float) -> None:
        if seconds > 0:
            self.clock += seconds

    def received(self, samples: int) -> None:
        self.samples += int(samples)
        self._marks.append((self.clock, self.samples))

    def rate(self) -> float:
        """Audio seconds per second of waiting over the window (or the whole stream, if shorter)."""
        start = self.clock - self.window
        while self._marks and self._marks[0][0] <= start:
            self._base = self._marks.popleft()[1]
        span = min(self.window, self.clock)
        return math.inf if span <= 0 else (self.samples - self._base) / SAMPLE_RATE / span

    def check(self) -> None:
        """Raise :class:`ProtocolError` ``too_slow`` if the client sends too little audio."""
        if self.min_rate <= 0 or self.clock < self.grace:
            return
        rate = self.rate()
        if rate < self.min_rate:
            raise ProtocolError("too_slow", f"the client sent {rate:.3g} s of audio per second over the last "
                                f"{min(self.window, self.clock):.3g} s; at least {self.min_rate:g} is required "
                                "(send silence, or end the stream)")
