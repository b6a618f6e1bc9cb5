"""Connection-level bounds of the server: a cap on open TCP connections and a deadline for the
request head (the WebSocket handshake request, or any HTTP request).

uvicorn's HTTP protocol (h11) closes an idle keep-alive connection after a response, but a
connection that never sends a complete request head is never closed, and its ``limit_concurrency``
is not applied to WebSocket upgrades. :func:`guarded_http_protocol` returns a subclass of
uvicorn's ``H11Protocol`` that

- refuses a connection with ``503`` and closes it at once when ``max_connections`` connections
  (HTTP and WebSocket, counted by uvicorn's shared server state) are open already, or when its
  client address (the peer's IP) holds ``max_per_client`` open connections already: one client
  re-opening silent sockets as they close can take at most ``max_per_client`` of the slots, not
  all of them;
- closes a connection whose request head is not complete ``head_timeout_s`` seconds after the
  connection was made (or after the previous response on a keep-alive connection): raw sockets
  that send nothing, and clients that drip a request's headers byte by byte.

Once the request is a WebSocket upgrade, the connection is handed to uvicorn's WebSocket protocol
and the stream's own limits (:class:`~asrdecode.serving.protocol.Limits`) take over.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional, Set

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import check_int, check_number

__all__ = ["ConnectionStats", "guarded_http_protocol"]

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: 26\r\n\r\ntoo many open connections\n")


@dataclass
class ConnectionStats:
    """Counters of :func:`guarded_http_protocol` (``/health`` reports them)."""

    refused: int = 0         # connections over max_connections or max_per_client
    head_timeouts: int = 0   # connections closed for an incomplete request head
    refused_per_client: int = 0  # of ``refused``: over max_per_client


class _ClientCounts:
    """Open transports per client address. A WebSocket upgrade hands the transport to another
    protocol object, so connections are counted by their transports, dropped once closing."""

    def __init__(self) -> None:
        self._by_client: dict[str, Set[Any]] = {}

    def add(self, client: str, transport: Any) -> int:
        """Count ``transport`` for ``client``; return the client's open connections, this one included."""
        live = {t for t in self._by_client.get(client, ()) if not t.is_closing()}
        live.add(transport)
        self._by_client[client] = live
        if len(self._by_client) > 1024:  # forget clients whose connections all closed
            self._by_client = {c: ts for c, ts in self._by_client.items()
                               if c == client or any(not t.is_closing() for t in ts)}
        return len(live)

    def discard(self, client: str, transport: Any) -> None:
        live = self._by_client.get(client)
        if live is not None:
            live.discard(transport)
            if not live:
                del self._by_client[client]


def _client_of(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return "" if peer is None else str(peer)  # a Unix socket: one client


def guarded_http_protocol(max_connections: int, head_timeout_s: float,
                          stats: Optional[ConnectionStats] = None,
                          max_per_client: Optional[int] = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap (global and per client address; ``None``: no
    per-client cap) and a request-head deadline (see the module docs)."""
    check_int("max_connections", max_connections, low=1, error=ValueError)
    check_int("max_connections_per_client", max_per_client, low=1, optional=True, error=ValueError)
    check_number("head_timeout_s (seconds)", head_timeout_s, low=0, low_open=True, finite=False, error=ValueError)
    counters = stats if stats is not None else ConnectionStats()
    clients = _ClientCounts()

    class GuardedH11Protocol(H11Protocol):
        stats = counters

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._head_timer: Optional[asyncio.TimerHandle] = None
            self._upgraded = False
            self._client = _client_of(transport)
            super().connection_made(transport)
            mine = clients.add(self._client, transport)  # this connection included
            over_client = max_per_client is not None and mine > max_per_client
            if len(self.connections) > max_connections or over_client:  # this connection included
                counters.refused += 1
                counters.refused_per_client += int(over_client)
                transport.write(_REFUSAL)
                transport.close()
                clients.discard(self._client, transport)
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
            clients.discard(self._client, self.transport)
            super().connection_lost(exc)

    return GuardedH11Protocol
