"""The Redis boundary: building clients and translating Redis errors, in one place.

Every client streamq uses comes from :func:`connect` (asyncio) or :func:`connect_sync`
(blocking): a deployment of one node or a Redis Cluster (:mod:`streamq.wire.routing`), which
gives clients bound to the slot of a stream's keys. Errors leave the boundary as the
streamq tree (:func:`translated`); replies are read through :mod:`.replies`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio
import redis
import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import (
    AuthenticationFailedError,
    ConfigError,
    GroupExistsError,
    GroupNotFoundError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
    UnknownCommandError,
)
from . import sentinel
from .pool_options import MAX_CONNECTIONS as MAX_CONNECTIONS
from .pool_options import POOL_OPTIONS as POOL_OPTIONS
from .pool_options import POOL_WAIT as POOL_WAIT
from .routing import RECONFIGURING, Deployment
from .routing_sync import SyncDeployment
from .seeds import split_seeds
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


# How long a one-shot operation on a cluster keeps retrying while the cluster reconfigures
# (a master fails and its replica takes over after cluster-node-timeout, a slot migrates).
RIDE_THROUGH = 30.0


def connect(url: str, *, cluster: bool | None = None) -> Deployment:
    """The deployment at ``url``: a single node, or any node of a cluster (``cluster=None``
    detects which on first use; ``True``/``False`` say it). Replies are raw bytes; retries
    are done by streamq's loops. A ``redis+sentinel://`` URL names the master of a
    Sentinel service instead (found again after a failover; see :mod:`.sentinel`); one
    with comma-separated ``host:port`` pairs names several nodes of a cluster (see
    :mod:`.seeds`)."""
    if is_sentinel_url(url):
        client = sentinel.async_client(url, max_connections=MAX_CONNECTIONS, pool_timeout=POOL_WAIT)
        return Deployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    first, seeds = split_seeds(url)
    pool = aioredis.BlockingConnectionPool.from_url(first, **POOL_OPTIONS)
    return Deployment(pool, cluster=cluster, seeds=seeds)


def connect_sync(url: str, *, cluster: bool | None = None) -> SyncDeployment:
    """The blocking twin of :func:`connect` (Publisher, metrics, Spark)."""
    if is_sentinel_url(url):
        client = sentinel.sync_client(url)
        return SyncDeployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    first, seeds = split_seeds(url)
    pool = redis.BlockingConnectionPool.from_url(first, **POOL_OPTIONS)
    return SyncDeployment(pool, cluster=cluster, seeds=seeds)


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
    """Translate redis-py errors into the streamq tree (``raise ... from e``); streamq's
    own errors (from an inner boundary) pass as they are."""
    try:
        yield
    except RedisFailure:
        raise
    except (rx.RedisError, OSError) as e:
        raise translate(e, stream, group) from e


def translate(error: BaseException, stream: str, group: str | None = None) -> RedisFailure:
    """The streamq error for a redis-py error or an OSError (raise it ``from error``); also
    for an error reply read in place of a result (a pipeline, ``raise_errors=False``)."""
    if isinstance(error, RedisFailure):
        return error
    if isinstance(error, rx.ResponseError):
        return _reply_error(error, stream, group)
    if isinstance(error, rx.AuthenticationError):
        return AuthenticationFailedError(f"the server refused the credentials: {error}")
    if isinstance(error, rx.ConnectionError | rx.TimeoutError | OSError):
        if "No connection available" in str(error):
            return ServerUnavailableError(
                f"no free connection in the client's pool after {POOL_WAIT:g}s ({error})"
            )
        return ServerUnavailableError(f"cannot reach the server: {error}")
    return RedisFailure(str(error))


def _reply_error(error: rx.ResponseError, stream: str, group: str | None) -> RedisFailure:
    """An error reply as streamq's error: the one place where reply text is matched."""
    text = str(error)
    if text.startswith("NOGROUP"):
        return GroupNotFoundError(
            f"consumer group {group!r} or stream {stream!r} does not exist ({text})"
        )
    if text.startswith("BUSYGROUP"):
        return GroupExistsError(f"consumer group {group!r} of {stream!r} exists ({text})")
    if _no_stream(text):
        return StreamNotFoundError(f"stream {stream!r} does not exist ({text})")
    if text.lower().startswith("unknown command"):
        return UnknownCommandError(f"the server does not know the command ({text})")
    if text.startswith(("WRONGPASS", "NOAUTH")):
        return AuthenticationFailedError(f"the server refused the credentials: {text}")
    if isinstance(error, RECONFIGURING):
        code = type(error).__name__.removesuffix("Error")
        return ServerUnavailableError(f"the cluster is reconfiguring ({code} {text})")
    if is_transient(error):
        return ServerUnavailableError(f"server not ready: {text}")
    return RedisFailure(text)


def _no_stream(text: str) -> bool:
    # Redis 7 wakes a blocked XREADGROUP with "UNBLOCKED the stream key no longer exists"
    # when the stream is deleted (Valkey answers NOGROUP on the next read); XGROUP SETID
    # on a missing key says that the subcommand "requires the key to exist".
    return (
        "no such key" in text.lower()
        or text.startswith("UNBLOCKED the stream key")
        or "requires the key to exist" in text
    )
