"""The browser page of ``asrdecode serve``: its routes, the info endpoint, the same-origin check.

- ``/`` is ``static/index.html``; ``/static/...`` the page's other files (plain ES modules and CSS
  in the package: no CDN, no build step). The page is sent with a Content-Security-Policy that
  allows only this origin, so it cannot load anything from elsewhere.
- ``/v1/info`` (JSON): the model (its name) and decoder in use with its resolved options, the stream
  latency in force, the sample rate, the frame length, the stream and transcription paths and the
  stream limits a client must respect; ``file_sample_rates`` (``min`` / ``max`` Hz): the rates of
  the files the page reads (:mod:`asrdecode.audio`'s bounds, the CLI's too).
- :func:`same_origin_only` wraps the WebSocket handler: a handshake whose ``Origin`` header names
  another origin than the ``Host`` it was sent to is refused (HTTP 403) before the stream opens,
  so a page of another site cannot use a visitor's browser to stream to this server. Clients that
  send no ``Origin`` (the load generator, scripts) are not browsers and keep working. An ``Origin``
  with userinfo (``user@host``) is refused.
- :class:`HostGuard` wraps the whole app: an HTTP request or WebSocket handshake whose ``Host`` is
  not one of the server's own (loopback, the bind address, ``--allowed-hosts``) is refused, which
  defeats DNS rebinding (a foreign name re-pointed at this server). The page and ``/health`` show
  the model's name, never its path on the server.

All of it goes through the server's HTTP layer and its connection limits
(:mod:`~asrdecode.serving.connections`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from ..audio import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from .protocol import SAMPLE_RATE
from .transcriptions import TRANSCRIPTIONS_PATH

__all__ = ["STATIC_DIR", "INFO_PATH", "page_routes", "server_info", "resolved_options", "stream_latency",
           "same_origin", "same_origin_only", "host_allowed", "HostGuard", "model_name", "LOOPBACK_NAMES"]

log = logging.getLogger("asrdecode.serving")
STATIC_DIR = Path(__file__).resolve().parent / "static"
INFO_PATH = "/v1/info"
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
_PAGE_HEADERS = {
    # this origin only (scripts, the audio worklet, styles, fetches and the WebSocket)
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'",
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}


def _host_port(netloc: str, default_port: Optional[int]) -> Optional[tuple[str, Optional[int]]]:
    """``(host, port)`` of ``host[:port]`` (IPv6 in brackets), lower-cased; ``None`` if malformed."""
    try:
        parts = urlsplit("//" + netloc)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host.lower(), (port if port is not None else default_port)


def same_origin(origin: Optional[str], host: Optional[str]) -> bool:
    """Whether a WebSocket handshake's ``Origin`` header names the origin that ``Host`` addresses.

    No ``Origin`` header (``None``): not a browser, allowed. An ``Origin`` of ``null`` (a file, a
    sandboxed frame), a malformed one, or a missing ``Host`` is refused. A ``Host`` without a port
    is taken at the default port of the origin's scheme (a page served on ``https://example.org``
    through a proxy reaches the server with ``Host: example.org``).
    """
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc or parts.path not in ("", "/") or not host:
        return False
    if "@" in parts.netloc:  # userinfo: no browser sends it; `http://127.0.0.1:80@evil.example` is evil's
        return False
    default = _DEFAULT_PORTS[scheme]
    theirs = _host_port(parts.netloc, default)
    ours = _host_port(host.strip(), default)
    return theirs is not None and theirs == ours


def same_origin_only(handler: Callable[[WebSocket], Awaitable[None]]) -> Callable[[WebSocket], Awaitable[None]]:
    """``handler`` for WebSockets whose ``Origin`` is this server's (or absent); others get HTTP 403."""

    async def guarded(ws: WebSocket) -> None:
        origin = ws.headers.get("origin")
        if not same_origin(origin, ws.headers.get("host")):
            log.warning("refused a WebSocket from origin %r (host %r)", origin, ws.headers.get("host"))
            await ws.close(code=1008)  # before accept: the handshake is answered with 403
            return
        await handler(ws)

    return guarded


def _public(value: Any) -> Any:
    """An option value as ``/v1/info`` shows it: scalars as they are, a path by its file name only (no
    server folders), a tuple as a list; ``None`` (objects, empty values) is left out."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return Path(value).name if ("/" in value or os.sep in value) else value
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (str, int, float)) for v in value):
        return [_public(v) for v in value]
    return None


def resolved_options(service: Any) -> dict[str, Any]:
    """The decoder's options in force: every option of the registry decoder, resolved for the model as
    ``transcribe`` resolves them (the service's ``transcriber.options``, when it has one: phone-ctc's
    tuned ``acoustic_scale``, ``wfst_beam``, ``max_active``, its graph's file name, ...), then the
    server's own scalar options (``boost_weight``, ...)."""
    from ..registry import decoder_for

    out: dict[str, Any] = {}
    transcriber: Any = getattr(service, "transcriber", None)
    opts = getattr(transcriber, "options", None)
    if opts is not None:
        for name in decoder_for(opts.decoder, transcriber.bundle.kind).options:
            value = _public(getattr(opts, name))
            if value is not None:
                out[name] = value
    for k, v in (service.config.decoder_options or {}).items():  # no objects, no server paths
        if isinstance(v, (bool, int, float)) or (isinstance(v, str) and "/" not in v and os.sep not in v):
            out[k] = v
    return out


def stream_latency(service: Any) -> dict[str, Any]:
    """``{"latency_seconds", "stream_front_end"}``: the latency in force for streams that name none
    (:func:`~asrdecode.streaming.latency.latency_in_force`: block + lookahead, ``docs/serving.md``
    *Latency*; without it the server config's ``latency``, else the lookahead) and the front end's
    block, left context and lookahead in seconds (``None`` without a block front end)."""
    from ..streaming.latency import latency_in_force

    front = getattr(getattr(service, "decoder", None), "front", None)
    shape = None
    if front is not None and hasattr(front, "samples_per_frame"):
        sec = front.samples_per_frame / SAMPLE_RATE
        shape = {"block_seconds": round(front.block_frames * sec, 4),
                 "left_context_seconds": round(front.left_context * sec, 4),
                 "lookahead_seconds": round(front.right_context * sec, 4)}
    in_force = latency_in_force(getattr(service, "decoder", None))
    latency = None if in_force is None else in_force["latency"]
    if latency is None:
        latency = getattr(service.config, "latency", None)
    if not isinstance(latency, (int, float)) or isinstance(latency, bool):
        latency = None if shape is None else shape["lookahead_seconds"]
    return {"latency_seconds": latency, "stream_front_end": shape}


#: Host names every server answers to, whatever its bind address (loopback addresses are checked as such)
LOOPBACK_NAMES = frozenset({"localhost"})
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


def _ip(name: str) -> Optional[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def host_allowed(host: Optional[str], bind_host: str, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether a request's ``Host`` header names this server: a loopback name or address, the bind
    address, one of ``allowed`` (``--allowed-hosts``, lower-case names), or, when bound to every
    interface (``0.0.0.0`` / ``::``), any IP address. Any port. No header (HTTP/1.0, not a browser): allowed.

    This is what stops DNS rebinding: a page of ``evil.example`` whose name was re-pointed at this
    server sends ``Host: evil.example`` (and a matching ``Origin``), which no check of Origin against
    Host can tell from a same-origin request. An IP-address Host cannot be rebound.
    """
    if host is None:
        return True
    if "@" in host:  # a Host header has no userinfo
        return False
    parsed = _host_port(host.strip(), None)
    if parsed is None:
        return False
    name = parsed[0]
    ip = _ip(name)
    if name in LOOPBACK_NAMES or name in allowed or (ip is not None and ip.is_loopback):
        return True
    bind = bind_host.strip("[]").lower()
    if ip is not None and (bind in _WILDCARD_BINDS or ip == _ip(bind)):
        return True
    return name == bind


class HostGuard:
    """ASGI middleware: HTTP requests and WebSocket handshakes whose ``Host`` is not this server's
    (:func:`host_allowed`) are refused before the app sees them: HTTP 421 (misdirected request), a
    WebSocket closed before accept (HTTP 403)."""

    def __init__(self, app: Any, bind_host: str, allowed: frozenset[str] = frozenset()) -> None:
        self.app, self.bind_host, self.allowed = app, bind_host, allowed

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] in ("http", "websocket"):
            hosts = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
            if len(hosts) > 1 or not host_allowed(hosts[0] if hosts else None, self.bind_host, self.allowed):
                log.warning("refused a %s request for host %r", scope["type"], hosts)
                if scope["type"] == "http":
                    await PlainTextResponse("this server does not answer to that Host", status_code=421)(
                        scope, receive, send)
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
        await self.app(scope, receive, send)


def model_name(spec: str) -> str:
    """What the server shows of its model spec: a bundled name or ``module:attribute`` as it is, a
    file or folder (``PATH.nemo``, a model directory) by its last component only (no server paths)."""
    if "/" in spec or os.sep in spec:
        return Path(spec.rstrip("/" + os.sep)).name or "model"
    return spec


def server_info(service: Any, stream_path: str) -> dict[str, Any]:
    """What the page shows and needs: model, decoder, its resolved options (:func:`resolved_options`),
    the stream latency in force (:func:`stream_latency`), rates and limits, and the transcription
    path when the server has one."""
    config = service.config
    limits = config.limits
    options = resolved_options(service)
    offline = {"transcriptions_path": TRANSCRIPTIONS_PATH} if getattr(service, "transcriber", None) is not None else {}
    return {"model": model_name(config.model), "decoder": config.decoder, "decoder_options": options,
            **stream_latency(service), **offline,
            "sample_rate": SAMPLE_RATE, "file_sample_rates": {"min": MIN_SAMPLE_RATE, "max": MAX_SAMPLE_RATE},
            "frame_seconds": service.frame_seconds, "stream_path": stream_path,
            "encodings": ["s16le", "f32le"], "max_chunk_seconds": limits.max_chunk_seconds,
            "max_stream_seconds": limits.max_stream_seconds, "max_abs_sample": limits.max_abs_sample,
            "max_streams": config.max_streams}


def page_routes(service: Any, stream_path: str) -> list:
    """The routes of the page: ``/``, ``/static/...`` and ``/v1/info``."""

    async def index(request: Request) -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8",
                            headers=_PAGE_HEADERS)

    async def info(request: Request) -> JSONResponse:
        return JSONResponse(server_info(service, stream_path), headers={"Cache-Control": "no-cache"})

    return [Route("/", index), Route(INFO_PATH, info),
            Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static")]
