"""TLS connections (``rediss://``) that fail fast against a plain port.

A plain Redis or Valkey port never answers a TLS ClientHello: it waits for a command that
never comes, so the handshake would wait for the whole connect timeout (5 s) and end in
"Timeout connecting to server", which names neither TLS nor the likely mistake. The
handshake is given its own short timeout instead (the TCP connect keeps the usual one), and
running out of it says what probably happened. A real TLS server answers a ClientHello in
a round trip or two: far below :data:`TLS_HANDSHAKE_TIMEOUT`.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import redis
import redis.asyncio as aioredis
from redis import exceptions as rx

# Seconds a TLS handshake may take once the TCP connection is up.
TLS_HANDSHAKE_TIMEOUT = 1.0


class TLSHandshakeNoAnswer(rx.ConnectionError):  # type: ignore[misc]
    """The server accepted the TCP connection but did not answer the TLS handshake."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"TLS handshake with {host}:{port} got no answer: is it a plain port? "
            f"use redis:// for it (no answer within {TLS_HANDSHAKE_TIMEOUT:g} s)"
        )


class SSLConnection(aioredis.SSLConnection):  # type: ignore[misc]
    """redis-py's asyncio TLS connection with a handshake timeout of its own."""

    def _connection_arguments(self) -> Mapping[str, Any]:
        return {**super()._connection_arguments(), "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT}

    async def _connect(self) -> None:
        try:
            await super()._connect()
        except ConnectionAbortedError as e:  # asyncio's "SSL handshake is taking longer..."
            if "handshake" not in str(e):
                raise
            raise TLSHandshakeNoAnswer(self.host, self.port) from e


class SyncSSLConnection(redis.SSLConnection):  # type: ignore[misc]
    """redis-py's blocking TLS connection with a handshake timeout of its own."""

    def _wrap_socket_with_ssl(self, sock: socket.socket) -> Any:
        sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
        try:
            wrapped = super()._wrap_socket_with_ssl(sock)
        except TimeoutError as e:  # socket.timeout
            raise TLSHandshakeNoAnswer(self.host, self.port) from e
        wrapped.settimeout(self.socket_timeout)
        return wrapped


def no_answer(error: BaseException) -> TLSHandshakeNoAnswer | None:
    """The :class:`TLSHandshakeNoAnswer` behind ``error`` (redis-py's asyncio connect wraps
    what connecting raised in a ConnectionError of its own), if any."""
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None or isinstance(seen, TLSHandshakeNoAnswer):
            return seen
        seen = seen.__cause__
    return None


def is_tls_url(url: str) -> bool:
    return url.lower().startswith("rediss://")
