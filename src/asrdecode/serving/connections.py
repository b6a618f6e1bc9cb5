"""Connection-level bounds of the server: a cap on open TCP connections and a deadline for the
request head (the WebSocket handshake request, or any HTTP request).

uvicorn's HTTP protocol (h11) closes an idle keep-alive connection after a response, but a
connection that never sends a complete request head is never closed, and its ``limit_concurrency``
is not applied to WebSocket upgrades. :func:`guarded_http_protocol` returns a subclass of
uvicorn's ``H11Protocol`` that

- refuses a connection with ``503`` and closes it at once when ``max_connections`` connections
  (HTTP and WebSocket, counted by uvicorn's shared server state) are open already;
- closes a connection whose request head is not complete ``head_timeout_s`` seconds after the
  connection was made (or after the previous response on a keep-alive connection): raw sockets
  that send nothing, and clients that drip a request's headers byte by byte.

Once the request is a WebSocket upgrade, the connection is handed to uvicorn's WebSocket protocol
and the stream's own limits (:class:`~asrdecode.serving.protocol.Limits`) take over.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionStats", "guarded_http_protocol"]

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: 26\r\n\r\ntoo many open connections\n")


@dataclass
class ConnectionStats:
    """Counters of :func:`guarded_http_protocol` (``/health`` reports them)."""

    refused: int = 0         # connections over max_connections
    head_timeouts: int = 0   # connections closed for an incomplete request head


def guarded_http_protocol(max_connections: int, head_timeout_s: float,
                          stats: Optional[ConnectionStats] = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap and a request-head deadline (see the module docs)."""
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be an integer >= 1, got {max_connections!r}")
    if isinstance(head_timeout_s, bool) or not isinstance(head_timeout_s, (int, float)) or not head_timeout_s > 0:
        raise ValueError(f"head_timeout_s must be a positive number of seconds, got {head_timeout_s!r}")
    counters = stats if stats is not None else ConnectionStats()

    class GuardedH11Protocol(H11Protocol):
        stats = counters

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._head_timer: Optional[asyncio.TimerHandle] = None
            self._upgraded = False
            super().connection_made(transport)
            if len(self.connections) > max_connections:  # this connection included
                counters.refused += 1
                transport.write(_REFUSAL)
                transport.close()
                return
            self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._upgraded and not self.transport.is_closing():
                counters.head_timeouts += 1
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
                self._cancel_head_timer()  # the request head is complete

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._upgraded = True
            self._cancel_head_timer()
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()  # a keep-alive connection's next request head is timed too

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

    return GuardedH11Protocol
