"""Real-server fixtures: one embedded Valkey per session (or $STREAMQ_REDIS_URL), a fresh
stream per test, and a factory for queues with fast timings. What tests import (waiting,
raw clients, queue helpers) lives in tests/helpers/."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redis.asyncio as aioredis

from streamq import EmbeddedCluster, MessageQueue
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect

# Imported here for the fixtures, and named again for test modules that still import them
# from tests.conftest (tests/helpers/ is where they live).
from tests.helpers.clients import each_master as each_master
from tests.helpers.clients import pending_count as pending_count
from tests.helpers.clients import sync_client as sync_client
from tests.helpers.queues import FAST as FAST
from tests.helpers.queues import QueueFactory as QueueFactory
from tests.helpers.queues import handled_messages as handled_messages
from tests.helpers.waiting import wait_for as wait_for

if TYPE_CHECKING:
    import httpx

pytest_plugins = ["pytester"]

# The Spark tests start JVMs (the shared session; the docs' Spark examples and the pipeline
# demo, one each): their jobs are small, and with the JVM's quick compiler alone and the
# serial collector each starts and runs in about two thirds of the time. The tests' own
# setting (set here, so their subprocesses inherit it): a user's Spark keeps the JVM's defaults.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url(streamq_url: str) -> str:
    """The session's real server: the shipped pytest plugin's (streamq.testing)."""
    return streamq_url


@pytest.fixture
def stream(streamq_stream: str) -> str:
    return streamq_stream


@pytest.fixture
async def client(redis_url: str, stream: str) -> AsyncIterator[aioredis.Redis]:
    """A raw client for the test stream's keys (on a cluster: its slot's master)."""
    deployment = connect(redis_url)
    yield deployment.client_for(stream)
    await deployment.aclose()


@pytest.fixture
def r(redis_url: str, stream: str) -> Iterator[redis.Redis]:
    """A blocking raw client for the test stream's keys (on a cluster: its slot's master)."""
    with sync_client(redis_url, stream) as client:
        yield client


@pytest.fixture
def web(redis_url: str) -> Iterator[httpx.Client]:
    """The dashboard over the session's server (write token set), not logged in: for the
    dashboard's tests, which skip without the [dashboard] extra this needs."""
    from tests.helpers.dashboard import dashboard_client

    with dashboard_client(redis_url) as client:
        yield client


@pytest.fixture(scope="session")
def on_cluster(redis_url: str) -> bool:
    """Whether the session's server is a Redis Cluster (``make test-cluster``)."""
    with sync_client(redis_url, "probe") as probe:
        probe.ping()
        return bool(probe.connection_pool.router.cluster)


@pytest.fixture(scope="module")
def pair() -> Iterator[EmbeddedCluster]:
    """An embedded cluster of one master and one replica (for durable publishing), one per
    test module that asks for it."""
    with EmbeddedCluster(masters=1, replicas=1) as cluster:
        yield cluster


@pytest.fixture
def replica(pair: EmbeddedCluster) -> Iterator[redis.Redis]:
    """A client of ``pair``'s replica, reading (``appendfsync`` reset after the test)."""
    (node,) = [n for n in pair.nodes if n.role == "replica"]
    with redis.Redis.from_url(node.url) as client:
        client.execute_command("READONLY")  # a cluster replica serves reads after this
        yield client
        client.config_set("appendfsync", "no")  # as the embedded cluster starts its nodes


@pytest.fixture(scope="module")
def replicated() -> Iterator[EmbeddedCluster]:
    """A cluster of three masters with a replica each, for a module whose tests kill and
    move things (``test_cluster.py``, ``test_cluster_operations.py``)."""
    with EmbeddedCluster(masters=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture
def replicated_stream(replicated: EmbeddedCluster) -> Iterator[str]:
    """A fresh stream on :func:`replicated`; its keys (and a topic's partitions) deleted
    after the test, once the cluster is whole again."""
    stream = f"test-{os.urandom(6).hex()}"
    yield stream
    replicated.wait_ready()
    for name in (stream, *partition_streams(stream, 6)):
        delete_stream_keys(replicated.url, name)


@pytest.fixture(params=["node", pytest.param("cluster", marks=pytest.mark.slow)])
def where(request: pytest.FixtureRequest) -> str:
    """The URL of the test server, then of the embedded cluster (a test runs on each; on the
    cluster it is ``slow``: the session's cluster is started for it)."""
    if request.param == "node":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("streamq_cluster_url"))


@pytest.fixture
def topic(where: str) -> Iterator[str]:
    """A fresh topic name on ``where``; its streams (plain, or of 2, 4 or 8 partitions)
    and their keys are deleted after the test."""
    name = f"test-{os.urandom(5).hex()}"
    yield name
    for partitions in (1, 2, 4, 8):
        for stream in partition_streams(name, partitions):
            delete_stream_keys(where, stream)


@pytest.fixture
def make_queue(streamq_queue: QueueFactory) -> QueueFactory:
    """The shipped ``streamq_queue`` factory, with this suite's short names: group ``g``,
    consumers ``c1``, ``c2``, ... (the plugin closes every queue after the test)."""
    count = 0

    def factory(**kwargs: Any) -> MessageQueue:
        nonlocal count
        count += 1
        return streamq_queue(**{"group": "g", "consumer": f"c{count}", **kwargs})

    return factory


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``), the tests of the shared SparkSession (the
    ``spark`` fixture) run in one process: one local session (a JVM) for all of them, not
    one per process. Spark tests that start their own (the docs' examples, the pipeline
    demo: subprocesses) go wherever there is room."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
