"""The browser page of ``asrdecode serve``: its routes, the info endpoint, the same-origin check.

- ``/`` is ``static/index.html``; ``/static/...`` the page's other files (plain ES modules and CSS
  in the package: no CDN, no build step). The page is sent with a Content-Security-Policy that
  allows only this origin, so it cannot load anything from elsewhere.
- ``/v1/info`` (JSON): the model and decoder in use, the sample rate, the frame length, the
  stream path and the stream limits a client must respect; ``file_sample_rates`` (``min`` / ``max``
  Hz): the rates of the files the page reads (:mod:`asrdecode.audio`'s bounds, the CLI's too).
- :func:`same_origin_only` wraps the WebSocket handler: a handshake whose ``Origin`` header names
  another origin than the ``Host`` it was sent to is refused (HTTP 403) before the stream opens,
  so a page of another site cannot use a visitor's browser to stream to this server. Clients that
  send no ``Origin`` (the load generator, scripts) are not browsers and keep working.

All of it goes through the server's HTTP layer and its connection limits
(:mod:`~asrdecode.serving.connections`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from ..audio import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from .protocol import SAMPLE_RATE

__all__ = ["STATIC_DIR", "INFO_PATH", "page_routes", "server_info", "same_origin", "same_origin_only"]

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


def server_info(service: Any, stream_path: str) -> dict[str, Any]:
    """What the page shows and needs: model, decoder, its scalar options, rates and limits."""
    config = service.config
    limits = config.limits
    options = {k: v for k, v in (config.decoder_options or {}).items()  # no objects, no server paths
               if isinstance(v, (bool, int, float)) or (isinstance(v, str) and "/" not in v and os.sep not in v)}
    return {"model": config.model, "decoder": config.decoder, "decoder_options": options,
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
