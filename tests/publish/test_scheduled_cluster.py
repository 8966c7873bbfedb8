"""Scheduled delivery and periodic publishing on one node, on a Redis Cluster (plain and
partitioned) and through a Sentinel URL: every key of one script call lives in one slot (no CROSSSLOT), the key
picks the partition, the wake-up notices ride sharded pub/sub."""

from __future__ import annotations

import json

import pytest

from streamq import Message, ScheduledId
from streamq.topic.partitions import partition_for_key, partition_streams
from streamq.wire.client import connect
from streamq.wire.keys import Keys
from tests.helpers.queues import queue
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("partitions", [1, 4])
async def test_scheduled_messages_on_a_node_and_a_cluster(
    where: str, topic: str, partitions: int
) -> None:
    mq = queue(where, topic, partitions=partitions)
    handled: list[Message[str]] = []

    @mq.handler("job")
    async def keep(msg: Message[str]) -> None:
        handled.append(msg)

    keys = [f"k{i}" for i in range(12)]
    for key in keys:
        sid = await mq.publish("job", key, delay=0.3, key=key)
        assert isinstance(sid, ScheduledId) and sid.in_partition == partition_for_key(
            key, partitions
        )
    doomed = await mq.publish("job", "cancelled", delay=0.3)
    assert (await mq.topic_info()).scheduled == 13
    assert await mq.cancel_scheduled(doomed)
    async with mq.running():
        await wait_for(lambda: len(handled) == 12, what="every scheduled message")
        later = await mq.publish("job", "later", delay=3600, schedule_id="later")
        assert [row.id for row in await mq.scheduled()] == [later]
        await mq.terminate_topic()
    assert sorted(m.data for m in handled) == sorted(keys)
    for msg in handled:
        assert msg.partition == partition_for_key(msg.data, partitions)
    deployment = connect(where)
    try:
        for stream in partition_streams(topic, partitions):
            client = deployment.client_for(stream)
            assert not await client.exists(Keys(stream).scheduled)
    finally:
        await deployment.aclose()


async def test_a_periodic_publisher_on_a_cluster(where: str, topic: str) -> None:
    a, b = queue(where, topic, partitions=4), queue(where, topic, partitions=4, consumer="c2")
    ticks: list[str] = []
    for mq in (a, b):

        @mq.handler("tick")
        async def keep(msg: Message[int]) -> None:
            ticks.append(msg.meta["periodic_tick"])

        mq.periodic("tick", every=0.2)(lambda: 1)
    async with a.running(), b.running():
        await wait_for(lambda: len(ticks) >= 5, what="five ticks")
    assert len(ticks) == len(set(ticks)), json.dumps(ticks)


async def test_scheduled_and_periodic_through_a_sentinel_url(streamq_sentinel_url: str) -> None:
    import os

    stream = f"test-{os.urandom(5).hex()}"
    mq = queue(streamq_sentinel_url, stream)
    handled: list[Message[str]] = []

    @mq.handler("job")
    async def keep(msg: Message[str]) -> None:
        handled.append(msg)

    mq.periodic("job", every=0.2, name="tick")(lambda: "tick")
    await mq.publish("job", "due", delay=0.2)
    doomed = await mq.publish("job", "cancelled", delay=0.5)
    assert await mq.cancel_scheduled(doomed)
    async with mq.running():
        await wait_for(lambda: "due" in [m.data for m in handled], what="the due message")
        await wait_for(lambda: "tick" in [m.data for m in handled], what="a tick")
        await mq.terminate_topic()
    assert "cancelled" not in [m.data for m in handled]
