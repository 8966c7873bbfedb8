"""A pytest plugin for users' tests: a real embedded server and a fresh stream per test.

Installed with streamq (entry point ``pytest11``), so in your project's tests::

    async def test_my_handler(streamq_queue):
        mq = streamq_queue(group="billing")
        ...

Fixtures: ``streamq_url`` (session: ``$STREAMQ_REDIS_URL`` or an embedded Valkey started
once per test session), ``streamq_stream`` (a unique stream name), ``streamq_queue`` (a
factory of MessageQueues on that stream, EARLIEST, short timings, closed after the test).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest

from .config import StartFrom, env_url
from .queue import MessageQueue
from .server import EmbeddedServer

TEST_TIMINGS: dict[str, Any] = {
    "claim_idle": 1.0,
    "claim_interval": 0.2,
    "block": 0.2,
    "grace": 5.0,
}


@pytest.fixture(scope="session")
def streamq_url() -> Iterator[str]:
    """URL of a real server for the whole test session."""
    url = env_url()
    if url:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


@pytest.fixture
def streamq_stream() -> str:
    """A stream name no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


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
            **TEST_TIMINGS,
            **kwargs,
        }
        mq = MessageQueue(streamq_url, **options)
        made.append(mq)
        return mq

    yield factory
    for mq in made:
        with anyio.move_on_after(10, shield=True):
            await mq.aclose()
