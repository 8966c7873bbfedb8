"""The Redis boundary: building clients and translating Redis errors, in one place.

Every client streamq uses comes from :func:`connect` (asyncio) or :func:`connect_sync`
(blocking): a deployment of one node or a Redis Cluster (:mod:`streamq.wire.routing`), which
gives clients bound to the slot of a stream's keys. Errors leave the boundary as the
streamq tree (:func:`translated`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import redis
import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import (
    AuthenticationFailedError,
    ConfigError,
    GroupNotFoundError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
)
from . import sentinel
from .routing import RECONFIGURING, Deployment
from .routing_sync import SyncDeployment
from .sentinel import is_sentinel_url

T = TypeVar("T")

# Errors after which a retry on a fresh connection may succeed.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    ServerUnavailableError,
    ConnectionError,
    OSError,
)
# Replies a server sends while it is loading or failing over, or a cluster node sends for a
# slot it does not serve (yet): wait and retry, never "group deleted".
_TRANSIENT_REPLIES = (
    "LOADING", "BUSY ", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED ", "ASK ", "CLUSTERDOWN",
)  # fmt: skip


def text(value: bytes | str) -> str:
    """A reply field as text (replies are bytes; decode_responses is off for speed).

    Names that are not UTF-8 (a group created by another client) keep their bytes as
    ``\\xNN`` escapes instead of failing.
    """
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def stream_rows(reply: Any) -> list[Any]:
    """The entries of a one-stream XREAD/XREADGROUP reply from redis-py, either protocol.

    redis-py's default (and ``?protocol=2``): ``[[stream, rows]]``; ``?protocol=3``:
    ``{stream: [rows]}``; no entries: None or empty. (Replies read raw, without redis-py's
    callbacks, have yet other shapes: see ``Consumer._read_new``.)
    """
    if not reply:
        return []
    if isinstance(reply, dict):
        (value,) = reply.values()
        return value[0] if value else []
    return reply[0][1]  # type: ignore[no-any-return]


# Connections per client. A caller past the limit waits for a free connection (up to
# POOL_WAIT) instead of failing: a web service publishes from every request at once.
MAX_CONNECTIONS = 64
POOL_WAIT = 30.0


# How long a command's reply may take before its connection counts as lost (a server that
# stopped answering). Set, not left to redis-py: 5 s since redis-py 8, none before. A
# command that waits on the server by design (a blocking read, WAIT) is given its own wait
# on top of this: blocking_timeout().
SOCKET_TIMEOUT = 5.0

# Every pool streamq makes: raw (bytes) replies, no redis-py retries (streamq's loops retry
# with their own backoff), keepalive, and a bounded pool that waits for a free connection.
POOL_OPTIONS: dict[str, Any] = dict(
    max_connections=MAX_CONNECTIONS,
    timeout=POOL_WAIT,
    decode_responses=False,
    retry_on_timeout=False,
    retry=None,
    socket_keepalive=True,
    socket_timeout=SOCKET_TIMEOUT,
)


def blocking_timeout(wait: float) -> float:
    """The read timeout of a command the server holds up to ``wait`` seconds by design
    (``XREADGROUP ... BLOCK``, ``WAIT``): that wait, then the usual :data:`SOCKET_TIMEOUT`."""
    return wait + SOCKET_TIMEOUT


# How long a one-shot operation on a cluster keeps retrying while the cluster reconfigures
# (a master fails and its replica takes over after cluster-node-timeout, a slot migrates).
RIDE_THROUGH = 30.0


def connect(url: str, *, cluster: bool | None = None) -> Deployment:
    """The deployment at ``url``: a single node, or any node of a cluster (``cluster=None``
    detects which on first use; ``True``/``False`` say it). Replies are raw bytes; retries
    are done by streamq's loops. A ``redis+sentinel://`` URL names the master of a
    Sentinel service instead (found again after a failover; see :mod:`.sentinel`)."""
    if is_sentinel_url(url):
        client = sentinel.async_client(url, max_connections=MAX_CONNECTIONS, pool_timeout=POOL_WAIT)
        return Deployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    pool = aioredis.BlockingConnectionPool.from_url(url, **POOL_OPTIONS)
    return Deployment(pool, cluster=cluster)


def connect_sync(url: str, *, cluster: bool | None = None) -> SyncDeployment:
    """The blocking twin of :func:`connect` (Publisher, metrics, Spark)."""
    if is_sentinel_url(url):
        client = sentinel.sync_client(url)
        return SyncDeployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    pool = redis.BlockingConnectionPool.from_url(url, **POOL_OPTIONS)
    return SyncDeployment(pool, cluster=cluster)


def _not_a_cluster(cluster: bool | None) -> bool:
    if cluster:
        raise ConfigError("cluster=True with a Sentinel URL: Sentinel serves one master")
    return False


async def ride_through(
    deployment: Deployment, operation: Callable[[], Awaitable[T]], *, patience: float = RIDE_THROUGH
) -> T:
    """Run a one-shot operation; on a cluster, retry it while the cluster reconfigures.

    ``operation`` raises streamq's errors (it runs under :func:`translated`). On a single
    node a ServerUnavailableError is raised at once, as before; on a cluster or a Sentinel
    service it is retried with backoff for up to ``patience`` seconds (the slot table is
    refreshed, the master looked up again, in between).
    An operation that was sent but whose reply was lost (a connection cut) may have been
    applied: a retried publish can then add its entry twice (at-least-once).
    """
    deadline, delay = time.monotonic() + patience, 0.05
    while True:
        try:
            return await operation()
        except ServerUnavailableError:
            if not deployment.fails_over or time.monotonic() + delay > deadline:
                raise
        await anyio.sleep(delay)
        delay = min(delay * 2, 1.0)


def ride_through_sync(
    deployment: SyncDeployment, operation: Callable[[], T], *, patience: float = RIDE_THROUGH
) -> T:
    """:func:`ride_through` for blocking code."""
    deadline, delay = time.monotonic() + patience, 0.05
    while True:
        try:
            return operation()
        except ServerUnavailableError:
            if not deployment.fails_over or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, rx.AuthenticationError | AuthenticationFailedError):
        return False
    if isinstance(error, TRANSIENT_ERRORS + RECONFIGURING):
        return True
    return isinstance(error, rx.ResponseError) and str(error).startswith(_TRANSIENT_REPLIES)


@contextmanager
def translated(stream: str, group: str | None = None) -> Iterator[None]:
    """Translate redis-py errors into the streamq tree (``raise ... from e``)."""
    try:
        yield
    except rx.ResponseError as e:
        text = str(e)
        if text.startswith("NOGROUP"):
            raise GroupNotFoundError(
                f"consumer group {group!r} or stream {stream!r} does not exist ({text})"
            ) from e
        if "no such key" in text.lower() or text.startswith("UNBLOCKED the stream key"):
            # Redis 7 wakes a blocked XREADGROUP with "UNBLOCKED the stream key no longer
            # exists" when the stream is deleted; Valkey answers NOGROUP on the next read.
            raise StreamNotFoundError(f"stream {stream!r} does not exist ({text})") from e
        if text.startswith(("WRONGPASS", "NOAUTH")):
            raise AuthenticationFailedError(f"the server refused the credentials: {text}") from e
        if isinstance(e, RECONFIGURING):
            code = type(e).__name__.removesuffix("Error")
            raise ServerUnavailableError(f"the cluster is reconfiguring ({code} {text})") from e
        if is_transient(e):
            raise ServerUnavailableError(f"server not ready: {text}") from e
        raise RedisFailure(text) from e
    except rx.AuthenticationError as e:
        raise AuthenticationFailedError(f"the server refused the credentials: {e}") from e
    except (rx.ConnectionError, rx.TimeoutError, ConnectionError, OSError) as e:
        if "No connection available" in str(e):
            raise ServerUnavailableError(
                f"no free connection in the client's pool after {POOL_WAIT:g}s ({e})"
            ) from e
        raise ServerUnavailableError(f"cannot reach the server: {e}") from e
