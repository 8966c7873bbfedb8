"""A pytest plugin for users' tests: a real embedded server and a fresh stream per test.

Installed with streamq (entry point ``pytest11``), so in your project's tests::

    async def test_my_handler(streamq_queue):
        mq = streamq_queue(group="billing")
        ...

Fixtures: ``streamq_url`` (session: ``$STREAMQ_REDIS_URL`` or an embedded Valkey started
once per test session), ``streamq_stream`` (a unique stream name; the stream and its
``streamq:{<stream>}:*`` keys are deleted after the test, every partition and priority
level stream too, so an external server keeps nothing), ``streamq_queue`` (a factory
of MessageQueues on that stream, EARLIEST, short timings, closed after the test),
``streamq_cluster_url`` (session: ``$STREAMQ_CLUSTER_URL`` or an embedded 3-master Redis
Cluster), ``streamq_sentinel_url`` (session:
``$STREAMQ_SENTINEL_URL`` or an embedded master, replica and three sentinels).

When the session ends, the temporary directories of embedded servers whose owner process
was killed (a test's subprocess SIGKILLed) are removed too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest

from .config import ConsumerConfig, StartFrom, env_url
from .errors import ConfigError, RedisFailure
from .queue import MessageQueue
from .server.directories import remove_orphaned
from .server.single import EmbeddedServer
from .topic.partitions import recorded_partitions_sync, recorded_priorities_sync
from .wire.client import connect_sync
from .wire.keys import Keys
from .wire.partition_names import topic_streams

log = logging.getLogger(__name__)

# Short timings for tests: pass as ``MessageQueue(..., config=TEST_TIMINGS)``.
TEST_TIMINGS = ConsumerConfig(claim_idle=1.0, claim_interval=0.2, block=0.2, grace=5.0)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the directories that killed owners of embedded servers left (the session's
    own servers are closed by their fixtures)."""
    remove_orphaned()


@pytest.fixture(scope="session")
def streamq_url() -> Iterator[str]:
    """URL of a real server for the whole test session."""
    url = env_url()
    if url:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def streamq_cluster_url() -> Iterator[str]:
    """URL of one node of a real Redis Cluster for the whole test session:
    ``$STREAMQ_CLUSTER_URL``, else an embedded cluster of three masters started once."""
    import os

    # a cluster (or sentinel, below) is started only by the tests that ask for one
    from .server.cluster import ENV_CLUSTER_URL, EmbeddedCluster

    url = os.environ.get(ENV_CLUSTER_URL)
    if url:
        yield url
        return
    with EmbeddedCluster(masters=3) as cluster:
        yield cluster.url


@pytest.fixture(scope="session")
def streamq_sentinel_url() -> Iterator[str]:
    """A ``redis+sentinel://`` URL for the whole test session: ``$STREAMQ_SENTINEL_URL``,
    else an embedded master, one replica and three sentinels started once."""
    import os

    from .server.sentinel import ENV_SENTINEL_URL, EmbeddedSentinel  # only when asked

    url = os.environ.get(ENV_SENTINEL_URL)
    if url:
        yield url
        return
    with EmbeddedSentinel() as sentinel:
        yield sentinel.url


@pytest.fixture
def streamq_stream(streamq_url: str) -> Iterator[str]:
    """A stream name no other test uses; deleted with its streamq keys after the test."""
    stream = f"test-{uuid.uuid4().hex[:12]}"
    yield stream
    delete_stream_keys(streamq_url, stream)


def delete_stream_keys(url: str, stream: str) -> None:
    """Delete ``stream`` and every ``streamq:{<stream>}:*`` key; when ``stream`` is a topic
    with partitions or priority levels, every stream of it and their keys too (as the
    topic's record says). Best effort: a test that broke the server must not also fail its
    teardown."""
    deployment = connect_sync(url)
    try:
        with deployment.client_for(stream) as client:
            streams = _streams_of(client, stream)
        for each in sorted(streams, key=lambda name: name == stream):  # the record last
            with deployment.client_for(each) as client:
                pattern = _glob_escape(Keys(each).prefix) + "*"
                client.delete(each, *client.scan_iter(match=pattern, count=1000))
    except (RedisFailure, OSError) as e:
        log.warning("could not delete the test stream %s: %s", stream, e)
    finally:
        deployment.close()


def _streams_of(client: Any, topic: str) -> set[str]:
    """``topic`` and the streams its record names (none when there is no record)."""
    try:
        partitions = recorded_partitions_sync(client, topic) or 1
        levels = recorded_priorities_sync(client, topic)
        return {topic, *topic_streams(topic, partitions, levels)}
    except ConfigError:  # a damaged record: the stream itself still goes
        return {topic}


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@pytest.fixture
async def streamq_queue(
    streamq_url: str, streamq_stream: str
) -> AsyncIterator[Callable[..., MessageQueue]]:
    """Factory: ``streamq_queue(**kwargs)`` -> a MessageQueue on the test's stream."""
    made: list[MessageQueue] = []

    def factory(**kwargs: Any) -> MessageQueue:
        options: dict[str, Any] = {
            "stream": streamq_stream,
            "group": "test-group",
            "consumer": f"test-consumer-{len(made) + 1}",
            "start": StartFrom.EARLIEST,
            "config": TEST_TIMINGS,
            **kwargs,
        }
        mq = MessageQueue(streamq_url, **options)
        made.append(mq)
        return mq

    yield factory
    for mq in made:
        with anyio.move_on_after(10, shield=True):
            await mq.aclose()
