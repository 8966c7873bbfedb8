"""The ``key`` field of wire format v1: written by ``publish(..., key=)`` on plain and
partitioned topics, read back as ``Message.key``; a key that is not text is refused at
publish and dead-lettered when a foreign producer wrote one."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, MessageFormatError, MessageQueue, Publisher
from streamq.message import encode_entry
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def test_encode_writes_the_key_field_only_when_given() -> None:
    assert encode_entry("x", {}, key="k1") == {b"type": "x", b"data": b"{}", b"key": "k1"}
    assert encode_entry("x", {}, key=b"k2")[b"key"] == b"k2"
    assert b"key" not in encode_entry("x", {})


def test_a_key_that_is_not_text_is_refused() -> None:
    with pytest.raises(MessageFormatError, match="not UTF-8 text"):
        encode_entry("x", {}, key=b"\xff\xfe")
    with pytest.raises(ConfigError, match="key must be str or bytes, got int"):
        encode_entry("x", {}, key=12)  # type: ignore[arg-type]


@pytest.mark.parametrize("partitions", [1, 3])
async def test_publish_writes_the_key_and_the_message_carries_it(
    make_queue: QueueFactory, redis_url: str, stream: str, partitions: int
) -> None:
    mq = make_queue(partitions=partitions)
    seen = handled_messages(mq)
    async with mq:
        keyed = await mq.publish("job", {"n": 1}, key="customer-7")
        keyless = await mq.publish("job", {"n": 2})
        many = await mq.publish_many("job", [{"n": 3}, {"n": 4}], key=lambda d: f"k{d['n']}")
        async with mq.running():
            await wait_for(lambda: len(seen) == 4, what="4 handled")
    by_id = {m.id: m for m in seen}
    assert by_id[keyed].key == "customer-7"
    assert by_id[keyless].key is None
    assert [by_id[i].key for i in many] == ["k3", "k4"]
    assert all(m.fencing_token is None for m in seen)  # not an ordered consumer


async def test_the_blocking_publisher_writes_the_key(
    make_queue: QueueFactory, redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    with Publisher(redis_url, stream) as publisher:
        publisher.publish("job", {"n": 1}, key="a")
        publisher.publish_many("job", [{"n": 2}], key="b")
    rows = await client.xrange(stream)
    assert [fields[b"key"] for _, fields in rows] == [b"a", b"b"]


async def test_a_foreign_entry_whose_key_is_not_text_is_dead_lettered_with_the_reason(
    make_queue: QueueFactory, stream: str, client: aioredis.Redis
) -> None:
    mq: MessageQueue = make_queue()
    seen: list[Message[Any]] = handled_messages(mq)
    async with mq:
        await client.xadd(stream, {"type": "job", "data": "{}", "key": b"\xff\xfe"})
        good = await mq.publish("job", {"n": 1}, key="fine")
        async with mq.running():
            await wait_for(lambda: len(seen) == 1, what="the good entry")

            async def dead_lettered() -> bool:  # written beside the good entry's handling
                return len(await mq.dead_letters()) == 1

            await wait_for(dead_lettered, what="a dead letter")
            letters = await mq.dead_letters()
    assert seen[0].id == good
    assert "'key' is not UTF-8 text" in letters[0].error
