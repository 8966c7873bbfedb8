"""The Redis boundary: building clients and translating Redis errors, in one place.

Every client streamq uses comes from :func:`connect` (asyncio) or :func:`connect_sync`
(blocking): a deployment of one node or a Redis Cluster (:mod:`streamq.wire.routing`), which
gives clients bound to the slot of a stream's keys. Their commands, pipelines and
hand-packed writes raise streamq's errors only (:mod:`.translate`); replies are read through
:mod:`.replies`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import redis
import redis.asyncio as aioredis

from ..errors import ConfigError, ServerUnavailableError
from . import tls as tls_conn
from .pool_options import MAX_CONNECTIONS as MAX_CONNECTIONS
from .pool_options import POOL_OPTIONS as POOL_OPTIONS
from .pool_options import pool_options
from .routing import Deployment
from .routing_sync import SyncDeployment
from .schemes import is_sentinel_url
from .seeds import split_seeds
from .timeouts import POOL_WAIT
from .translate import (  # noqa: F401  (re-exported: the boundary's names)
    TRANSIENT_ERRORS,
    is_loading,
    is_transient,
    translate,
    translated,
)
from .urls import check_url

T = TypeVar("T")

# How long a one-shot operation on a cluster keeps retrying while the cluster reconfigures
# (a master fails and its replica takes over after cluster-node-timeout, a slot migrates).
RIDE_THROUGH = 30.0


def connect(url: str, *, cluster: bool | None = None) -> Deployment:
    """The deployment at ``url``: a single node, or any node of a cluster (``cluster=None``
    detects which on first use; ``True``/``False`` say it). Replies are raw bytes; retries
    are done by streamq's loops. A ``redis+sentinel://`` URL names the master of a
    Sentinel service instead (found again after a failover; see :mod:`.sentinel`); one
    with comma-separated ``host:port`` pairs names several nodes of a cluster (see
    :mod:`.seeds`). A URL a client would misread raises :class:`ConfigError` (never
    quoting the URL: see :mod:`.urls`)."""
    check_url(url)
    if is_sentinel_url(url):
        from . import sentinel  # redis-py's Sentinel clients, for a Sentinel URL only

        client = sentinel.async_client(url, max_connections=MAX_CONNECTIONS, pool_timeout=POOL_WAIT)
        return Deployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    first, seeds = split_seeds(url)
    pool = aioredis.BlockingConnectionPool.from_url(first, **pool_options(first))
    if tls_conn.is_tls_url(first):  # (from_url sets the class from the scheme, after kwargs)
        pool.connection_class = tls_conn.SSLConnection
    return Deployment(pool, cluster=cluster, seeds=seeds)


def connect_sync(url: str, *, cluster: bool | None = None) -> SyncDeployment:
    """The blocking twin of :func:`connect` (Publisher, metrics, Spark)."""
    check_url(url)
    if is_sentinel_url(url):
        from . import sentinel  # redis-py's Sentinel clients, for a Sentinel URL only

        client = sentinel.sync_client(url)
        return SyncDeployment(client.connection_pool, cluster=_not_a_cluster(cluster), owner=client)
    first, seeds = split_seeds(url)
    pool = redis.BlockingConnectionPool.from_url(first, **pool_options(first))
    if tls_conn.is_tls_url(first):
        pool.connection_class = tls_conn.SyncSSLConnection
    return SyncDeployment(pool, cluster=cluster, seeds=seeds)


def _not_a_cluster(cluster: bool | None) -> bool:
    if cluster:
        raise ConfigError("cluster=True with a Sentinel URL: Sentinel serves one master")
    return False


async def ride_through(
    deployment: Deployment, operation: Callable[[], Awaitable[T]], *, patience: float = RIDE_THROUGH
) -> T:
    """Run a one-shot operation; on a cluster, retry it while the cluster reconfigures.

    ``operation`` raises streamq's errors (streamq's clients translate). On a single
    node a ServerUnavailableError is raised at once, as before; on a cluster or a Sentinel
    service it is retried with backoff for up to ``patience`` seconds (the slot table is
    refreshed, the master looked up again, in between). A server that answers ``LOADING``
    (it is starting: reading its data) is waited for so on any deployment.
    An operation that was sent but whose reply was lost (a connection cut) may have been
    applied: publishes are therefore sent again checked (:mod:`streamq.publish.resend`);
    other callers retry only what is safe to repeat.
    """
    deadline, delay = time.monotonic() + patience, 0.05
    while True:
        try:
            return await operation()
        except ServerUnavailableError as e:
            if not worth_waiting(deployment, e) or time.monotonic() + delay > deadline:
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
        except ServerUnavailableError as e:
            if not worth_waiting(deployment, e) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def worth_waiting(deployment: Deployment | SyncDeployment, error: BaseException) -> bool:
    """Whether a one-shot operation that failed on ``error`` is tried again: while another
    node takes over (a cluster, Sentinel), or while the server loads its data."""
    return deployment.fails_over or is_loading(error)
