"""The options of every connection pool streamq makes, for plain, cluster and Sentinel URLs
(:mod:`.client`, :mod:`.sentinel`): one definition, so that no kind of URL gets other
connections than the rest."""

from __future__ import annotations

from typing import Any

from .timeouts import POOL_WAIT, SOCKET_TIMEOUT

# Connections per client. A caller past the limit waits for a free connection (up to
# POOL_WAIT) instead of failing: a web service publishes from every request at once.
MAX_CONNECTIONS = 64

# Every connection: raw (bytes) replies, no redis-py retries (streamq's loops retry with
# their own backoff), keepalive, and a reply timeout.
CONNECTION_OPTIONS: dict[str, Any] = dict(
    decode_responses=False,
    retry_on_timeout=False,
    retry=None,
    socket_keepalive=True,
    socket_timeout=SOCKET_TIMEOUT,
)

# Every blocking pool: those connections, at most MAX_CONNECTIONS, waiting for a free one.
POOL_OPTIONS: dict[str, Any] = dict(
    max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT, **CONNECTION_OPTIONS
)

# TCP keepalive is an option of TCP sockets: a unix socket's connection takes no such option.
_TCP_ONLY = ("socket_keepalive",)


def pool_options(url: str) -> dict[str, Any]:
    """The options of a pool for a ``redis://``, ``rediss://`` or ``unix://`` URL."""
    if url.lower().startswith("unix://"):
        return {k: v for k, v in POOL_OPTIONS.items() if k not in _TCP_ONLY}
    return POOL_OPTIONS
