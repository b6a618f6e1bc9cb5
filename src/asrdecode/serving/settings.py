"""The server's settings: :class:`ServerConfig` (``asrdecode serve``) and :class:`TranscriptionConfig` (its
``POST /v1/audio/transcriptions``), without the web framework, so that the CLI reads their defaults and help
(:func:`~asrdecode.configs.setting` metadata, ``cli=True``: a ``serve`` flag) where they are written once.
:mod:`.server` and :mod:`.transcriptions` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..configs import setting
from ..errors import check_int, check_number
from .protocol import Limits

__all__ = ["ServerConfig", "TranscriptionConfig"]


def _default_model() -> str:
    from ..models import default_model

    return default_model()


@dataclass
class ServerConfig:
    """Settings of :func:`build_service` / ``asrdecode serve``.

    Attributes:
        model: a model spec (:func:`~asrdecode.models.load_bundle`: a bundled name, ``PATH.nemo``,
            ``module:attribute``); default: the CLI's (:func:`~asrdecode.models.default_model`: phone-ctc
            when hama is installed, else demo-rnnt).
        decoder: ``greedy`` | ``beam`` | ``wfst`` (CTC only); ``None``: the model's default decoder with
            its ``decode_defaults`` (phone-ctc: WFST over its cached graph; the demo models: greedy).
        decoder_options: registry options (:data:`asrdecode.registry.OPTIONS`: ``beam``, ``lm``,
            ``wfst_beam``, ...; resolved with the model as ``transcribe`` resolves them) and other
            keyword arguments of :class:`~asrdecode.streaming.StreamDecoder` (``boost_weight``, ...).
        max_batch: most streams per decoder step (1 = batching off).
        max_wait_ms: longest wait of the oldest ready chunk for a batch to fill.
        max_pending: per-stream bound on chunks queued, being decoded or waiting to be sent.
        max_streams: most concurrent streams; more are refused with ``server_busy``.
        max_connections: most open TCP connections (streams, handshakes in progress, HTTP);
            more are refused with HTTP 503 and closed at once. At least ``max_streams``; default
            (None) twice ``max_streams``.
        max_connections_per_client: most open TCP connections from one client address (IP);
            more are refused as over ``max_connections``. ``None``: no per-client cap. Clamped to
            half of ``max_connections`` (at least 1), so one address holding idle sockets cannot
            take every slot.
        allowed_hosts: ``Host`` names the server answers to besides loopback and its bind address
            (a DNS name clients use to reach it); other Hosts are refused (DNS rebinding).
        handshake_timeout_s: a connection whose request head (the WebSocket handshake request)
            is not complete this long after it was made is closed.
        drain_timeout_s: on shutdown, how long open streams may go on before they are ended.
        limits: the per-stream protocol limits.
        warmup_seconds: at startup, decode this much silence once (first-call costs are paid
            before the first client; 0 = no warm-up).
    """

    model: str = field(default_factory=_default_model)
    decoder: Optional[str] = None
    decoder_options: dict[str, Any] = field(default_factory=dict)
    max_batch: int = setting(32, "streams per decoder step; 1 = no batching", cli=True)
    max_wait_ms: float = setting(10.0, "longest wait for a batch to fill", cli=True)
    max_pending: int = setting(8, "per-stream chunks queued before the server stops reading it", cli=True,
                               flag="--max-queue")
    max_streams: int = setting(256, "most concurrent streams", cli=True)
    max_connections: Optional[int] = setting(None, "most open TCP connections, handshakes included (default: 2 x "
                                             "--max-streams)", kind="int", cli=True)
    max_connections_per_client: Optional[int] = setting(32, "most open TCP connections from one client address (0: "
                                                        "no cap; at most half of --max-connections)", cli=True)
    allowed_hosts: tuple[str, ...] = ()
    handshake_timeout_s: float = 10.0
    drain_timeout_s: float = setting(30.0, "on shutdown, seconds open streams may go on", cli=True,
                                     flag="--drain-timeout")
    limits: Limits = field(default_factory=Limits)
    warmup_seconds: float = 2.0

    def __post_init__(self) -> None:
        from ..registry import OPTION, check_types, decoder_names

        if self.decoder is not None and self.decoder not in decoder_names():
            raise ValueError(f"decoder must be one of {list(decoder_names())} or None, got {self.decoder!r}")
        check_types({k: v for k, v in self.decoder_options.items() if k in OPTION})
        check_int("max_streams", self.max_streams, low=1, error=ValueError)
        if not (isinstance(self.drain_timeout_s, (int, float)) and self.drain_timeout_s >= 0):
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s!r}")
        if self.max_connections is None:
            self.max_connections = 2 * self.max_streams
        check_int("max_connections", self.max_connections, low=self.max_streams,
                  error=lambda message: ValueError(f"{message} (at least max_streams)"))
        per = self.max_connections_per_client
        check_int("max_connections_per_client", per, low=1, optional=True, error=ValueError)
        if per is not None:
            self.max_connections_per_client = min(per, max(1, self.max_connections // 2))
        self.allowed_hosts = tuple(_checked_host_name(h) for h in self.allowed_hosts)
        h = self.handshake_timeout_s
        check_number("handshake_timeout_s (seconds)", h, low=0, low_open=True, error=ValueError)


def _checked_host_name(name: object) -> str:
    """An ``allowed_hosts`` entry as a lower-case host name (no scheme, port, path or userinfo)."""
    if not isinstance(name, str) or not name.strip() or any(c in name for c in "/@:?#[] \t\r\n"):
        raise ValueError(f"allowed_hosts entries must be host names (no scheme, port or path), got {name!r}")
    return name.strip().lower().rstrip(".")




@dataclass(frozen=True)
class TranscriptionConfig:
    """Settings of the endpoint.

    Attributes:
        max_upload_mb: largest request body, in MB (OpenAI's limit is 25).
        max_audio_seconds: longest audio accepted.
        long_audio_seconds: longer files are decoded in windows (``transcribe --long-audio-seconds``).
        max_waiting: most transcriptions running or waiting; more get 503.
    """

    max_upload_mb: float = setting(25.0, "POST /v1/audio/transcriptions: largest file, in MB", cli=True)
    max_audio_seconds: float = setting(3600.0, "POST /v1/audio/transcriptions: longest audio", cli=True,
                                       flag="--max-upload-seconds")
    long_audio_seconds: float = setting(60.0, "POST /v1/audio/transcriptions: longer files are cut into windows at "
                                        "pauses, each decoded whole, as `transcribe` does", cli=True)
    max_waiting: int = 16

    def __post_init__(self) -> None:
        for name in ("max_upload_mb", "max_audio_seconds", "long_audio_seconds"):
            check_number(name, getattr(self, name), low=0, low_open=True, error=ValueError)
        check_int("max_waiting", self.max_waiting, low=1, error=ValueError)
