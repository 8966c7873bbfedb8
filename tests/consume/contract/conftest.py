"""The ``mode`` and ``kind`` fixtures: each test of this folder states the engine's
contract once and runs against every consumer mode (modes.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis.asyncio as aioredis

from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect
from tests.consume.contract.modes import KINDS, MODES, Mode
from tests.helpers.queues import QueueFactory


@pytest.fixture(params=MODES)
def mode(
    request: pytest.FixtureRequest, make_queue: QueueFactory, stream: str, redis_url: str
) -> Iterator[Mode]:
    """Each mode in turn, its queues on the test's stream (a topic of two partitions for
    the ``-p2`` modes, whose partition streams are deleted after the test)."""
    mode = Mode(request.param, make_queue, stream, request)
    yield mode
    if mode.partitions > 1:
        for name in partition_streams(stream, mode.partitions):
            delete_stream_keys(redis_url, name)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, make_queue: QueueFactory, stream: str) -> Mode:
    """The three kinds of consumer on a plain stream, for tests too slow to run on
    partitioned topics as well."""
    return Mode(request.param, make_queue, stream, request)


@pytest.fixture
async def client_for(redis_url: str) -> AsyncIterator[Callable[[str], aioredis.Redis]]:
    """A raw client for any stream's keys (on a cluster: its slot's master), so a test can
    reach each partition stream of a topic."""
    deployment = connect(redis_url)
    yield deployment.client_for
    await deployment.aclose()
