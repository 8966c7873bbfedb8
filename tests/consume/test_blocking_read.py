"""A blocking read longer than redis-py's socket timeout (5 s since redis-py 8) is a read,
not a lost connection: the read loop waits ``block`` seconds on an idle topic without a
warning or a reconnect, then gets the next entry."""

from __future__ import annotations

import dataclasses
import logging
import time

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, NotReplicatedError
from streamq.testing import TEST_TIMINGS
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

BLOCK = 6.0  # past redis-py 8's default socket_timeout of 5 s


async def reader_connections(client: aioredis.Redis) -> set[int]:
    """IDs of the connections blocked in XREADGROUP (CLIENT LIST's ``cmd``)."""
    clients = await client.client_list()
    return {int(c["id"]) for c in clients if c.get("cmd") == "xreadgroup"}


async def test_a_block_longer_than_the_socket_timeout_is_no_read_failure(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    mq = make_queue(config=dataclasses.replace(TEST_TIMINGS, block=BLOCK))
    got: list[tuple[int, float]] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        got.append((msg.data, time.monotonic()))

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await wait_for(lambda: _blocked(client), what="the read loop blocked in XREADGROUP")
        first = await reader_connections(client)
        await anyio.sleep(BLOCK + 1.5)  # idle: one read times out on the server, the next blocks
        assert await reader_connections(client) == first, "the read loop reconnected"
        sent = time.monotonic()
        await mq.publish("job", 1)
        await wait_for(lambda: bool(got), what="the entry published during a blocked read")
        assert got[0][1] - sent < 2.0, "the entry waited for the next read instead"
        await mq.stop()
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert failures == []


async def _blocked(client: aioredis.Redis) -> bool:
    return bool(await reader_connections(client))


async def test_a_durable_publish_may_wait_longer_than_the_socket_timeout(
    make_queue: QueueFactory,
) -> None:
    """``WAIT`` holds the reply up to ``timeout``: past 5 s that is still NotReplicatedError
    (too few replicas), not a lost connection (ServerUnavailableError)."""
    mq = make_queue()
    async with mq:
        started = time.monotonic()
        with pytest.raises(NotReplicatedError):  # no server here has 5 replicas per master
            await mq.publish("job", 1, replicas=5, timeout=BLOCK)
        assert time.monotonic() - started >= BLOCK - 0.5


async def test_an_idle_ordered_partition_blocks_past_the_socket_timeout_without_a_failure(
    redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ordered mode waits for new entries with ``XREAD BLOCK``: a wait longer than the
    socket timeout is a wait, not a read that failed and is retried with a warning."""
    caplog.set_level(logging.WARNING)
    url = redis_url + ("&" if "?" in redis_url else "?") + "socket_timeout=1"
    config = dataclasses.replace(TEST_TIMINGS, block=2.0)
    mq = MessageQueue(url, stream=stream, group="g", ordered=True, config=config)
    got: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        got.append(msg.data)

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await mq.publish("job", 1)
        await wait_for(lambda: got == [1], what="the first entry handled by the owner")
        await anyio.sleep(3.5)  # idle: waits of 2 s each, past the 1 s socket timeout
        await mq.publish("job", 2)
        await wait_for(lambda: got == [1, 2], what="the entry published while idle")
        await mq.stop()
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert failures == [], "an idle wait was taken for a failed read"
