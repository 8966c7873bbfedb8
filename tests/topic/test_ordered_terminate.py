"""Terminating a topic consumed in ordered mode: the membership and the partitions' leases
go with it (whether its consumers had stopped or still run), and the fencing tokens of the
topic created again under the same name are greater than every token before."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue
from streamq.wire import ownership as wire
from streamq.wire.client import connect
from tests.helpers.queues import QueueFactory, queue
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

LEASE = 2.0


def _ordered(make_queue: QueueFactory, **options: Any) -> MessageQueue:
    settings: dict[str, Any] = {"ordered": True, "partitions": 2, "ownership_lease": LEASE}
    mq = make_queue(**{**settings, **options})

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    return mq


async def _tokens_once_owned(mq: MessageQueue) -> list[int]:
    tokens: list[int] = []

    async def owned() -> bool:
        tokens[:] = [o[1] for o in await mq.partition_owners() if o is not None]
        return len(tokens) == mq.partitions

    await wait_for(owned, what="every partition owned")
    return tokens


async def _left_behind(client: aioredis.Redis, stream: str) -> list[str]:
    """The topic's keys still there, but for the short-lived marks a terminate leaves."""
    keys = [key for pattern in (f"{stream}*", f"streamq:{{{stream}*")
            async for key in client.scan_iter(match=pattern, count=1000)]  # fmt: skip
    return sorted([key.decode() for key in keys if await client.pttl(key) < 0])  # no expiry


async def test_terminate_removes_the_membership_and_leases_of_stopped_members(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    first, second = _ordered(make_queue), _ordered(make_queue)
    async with first, second:
        async with first.running(), second.running():
            await _tokens_once_owned(first)
        assert await _left_behind(client, stream) != []  # the topic, records and leases
        await first.terminate_topic()
    assert await _left_behind(client, stream) == []


async def test_terminate_removes_the_membership_and_leases_of_running_members(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = _ordered(make_queue)
    async with mq, mq.running():
        await _tokens_once_owned(mq)
        await mq.terminate_topic()
        await wait_for(mq.done.is_set, what="the consumer stopped")
    assert mq.stop_reason == "topic_terminated"
    assert await _left_behind(client, stream) == []


async def test_a_member_still_running_after_a_terminate_writes_none_of_its_keys_again(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, redis_url: str
) -> None:
    """A member's tick or stop that comes after the terminate, before its notice."""
    mq = _ordered(make_queue)
    async with mq:
        await mq.terminate_topic()
    late = await wire.heartbeat(client, stream, "g", "late", LEASE, [0], partitioned=True)
    assert late == []
    deployment = connect(redis_url)  # the partition stream's own node (a cluster)
    partition = deployment.client_for(mq.streams[0])
    assert await wire.acquire(partition, mq.streams[0], "g", "late", LEASE) is None
    await deployment.aclose()
    await wire.leave(client, stream, "g", "late")
    assert await _left_behind(client, stream) == []


async def test_fencing_tokens_of_a_topic_created_again_are_greater_than_any_before(
    make_queue: QueueFactory,
) -> None:
    before = _ordered(make_queue)
    async with before:
        for _ in range(3):  # each run takes the leases again: new tokens
            async with before.running():
                tokens = await _tokens_once_owned(before)
        await before.terminate_topic()
    again = _ordered(make_queue)
    async with again, again.running():
        assert min(await _tokens_once_owned(again)) > max(tokens)


@pytest.mark.parametrize("partitions", [1, 2])
async def test_terminate_removes_ordered_keys_on_every_node(
    where: str, topic: str, partitions: int
) -> None:
    """On a cluster too: each lease on its partition's node, the membership on the
    topic's."""
    mq = _ordered(lambda **o: queue(where, topic, **o), partitions=partitions)
    async with mq:
        async with mq.running():
            await _tokens_once_owned(mq)
        keys = [(topic, wire.members_key(topic, "g"))]
        keys += [(stream, wire.lease_key(stream, "g")) for stream in mq.streams]
        assert all([await mq.client_for(at).exists(key) for at, key in keys])
        await mq.terminate_topic()
        assert not any([await mq.client_for(at).exists(key) for at, key in keys])
