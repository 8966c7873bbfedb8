"""Operating ordered consumption on the real server: topic_info() shows each partition's
owner (consumer and fencing token) while ordered consumers run, and none otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from streamq import Message, MessageQueue
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

LEASE = 2.0


async def wait_for_owned(mq: MessageQueue) -> None:
    owners: list[tuple[str, int] | None] = [None]

    async def owned() -> bool:
        owners[:] = await mq.partition_owners()
        return all(o is not None for o in owners)

    await wait_for(owned, what="every partition owned")


async def test_topic_info_shows_each_partitions_owner(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, partitions=3, ownership_lease=LEASE)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    group = mq.group or ""
    async with mq:
        await mq.publish("job", {"n": 1}, key="a")
        assert all(row.owners == {} for row in (await mq.topic_info()).partitions)
        async with mq.running():
            await wait_for_owned(mq)
            rows = (await mq.topic_info()).partitions
            expected = await mq.partition_owners()
    assert [row.owners[group] for row in rows] == expected
    assert {owner[0] for owner in expected if owner is not None} == {mq.consumer}


async def test_plain_ordered_stream_shows_its_one_owner(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, ownership_lease=LEASE)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    group = mq.group or ""
    async with mq:
        await mq.publish("job", {"n": 1}, key="a")
        assert (await mq.topic_info()).group(group).owner is None
        async with mq.running():
            await wait_for_owned(mq)
            owner = (await mq.topic_info()).group(group).owner
    assert owner is not None and owner[0] == mq.consumer and owner[1] >= 1
