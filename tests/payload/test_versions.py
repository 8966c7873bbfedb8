"""Schema versions: ``ver`` written by publishers, older entries upcast step by step before
validation, newer ones waiting for a consumer that knows them (or dead-lettered)."""

from __future__ import annotations

import logging

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, RetryPolicy
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

from .helpers import ONE_DELIVERY, OrderV3, dead_letters, keeping, v1_to_v2, v2_to_v3

pytestmark = pytest.mark.anyio

UPCASTS = {1: v1_to_v2, 2: v2_to_v3}


async def test_older_entries_are_upcast_step_by_step_before_validation(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    await client.xadd(stream, {"type": "order", "data": '{"id": 1, "client": "ada"}'})
    await client.xadd(stream, {"type": "order", "ver": "2", "data": '{"id": 2, "customer": "bob"}'})
    await client.xadd(stream, {"type": "order", "ver": "3",
                               "data": '{"id": 3, "customer": "cy", "currency": "USD"}'})  # fmt: skip
    mq = make_queue()
    handled = keeping(mq, "order", version=3, upcast=UPCASTS, model=OrderV3)
    async with mq.running():
        await wait_for(lambda: len(handled) == 3, what="three orders")
    assert [m.data for m in handled] == [
        OrderV3(id=1, customer="ada", currency="EUR"),
        OrderV3(id=2, customer="bob", currency="EUR"),
        OrderV3(id=3, customer="cy", currency="USD"),
    ]


async def test_a_batch_handler_gets_upcast_entries_too(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    await client.xadd(stream, {"type": "order", "data": '{"id": 1, "client": "ada"}'})
    mq = make_queue()
    got: list[OrderV3] = []

    @mq.batch_handler("order", size=1, version=3, upcast=UPCASTS)
    async def store(msgs: list[Message[OrderV3]]) -> None:
        got.extend(m.data for m in msgs)

    async with mq.running():
        await wait_for(lambda: len(got) == 1, what="the batch")
    assert got == [OrderV3(id=1, customer="ada", currency="EUR")]


async def test_publishing_writes_the_version_of_the_handler_or_the_typed_publisher(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue()
    keeping(mq, "order", version=3, upcast=UPCASTS, model=OrderV3)
    keeping(mq, "plain")
    receipts = mq.publisher("receipt", OrderV3, version=2)
    async with mq:
        await mq.publish("order", OrderV3(id=1, customer="a", currency="EUR"))
        await receipts.publish(OrderV3(id=2, customer="b", currency="EUR"))
        await mq.publish("plain", {"n": 1})
    rows = [fields for _id, fields in await client.xrange(stream)]
    assert [row.get(b"ver") for row in rows] == [b"3", b"2", None]
    with pytest.raises(ConfigError, match="another publisher of the type has version=2"):
        mq.publisher("receipt", OrderV3, version=4)


async def test_a_newer_version_dead_letters_when_so_configured(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    await client.xadd(stream, {"type": "order", "ver": "4", "data": "{}"})
    mq = make_queue(retry=ONE_DELIVERY, on_newer_version="dead_letter")
    keeping(mq, "order", version=3, upcast=UPCASTS, model=OrderV3)
    async with mq:
        async with mq.running():
            await dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert "entry version 4 is newer than this handler's version 3" in letter.error


async def test_a_newer_version_waits_for_a_consumer_that_knows_it(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamq")
    await client.xadd(stream, {"type": "order", "ver": "4", "data": '{"id": 1}'})
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1,
                        unknown_type_deliveries=50)  # fmt: skip
    old = make_queue(retry=retry)
    old_handled = keeping(old, "order", version=3, upcast=UPCASTS, model=OrderV3)
    async with old:
        async with old.running():
            await wait_for(
                lambda: old.stats().get("received", 0) >= 1, what="the old consumer got it"
            )
            await anyio.sleep(0.3)
        info = await old.topic_info()
    assert not old_handled and info.dead_letters == 0 and info.pending == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings  # the old consumer has a handler of the type
    assert warnings[0].startswith("entry version 4 is newer than this handler's version 3")
    assert warnings[0].endswith("left for a consumer that knows it")
    new = make_queue(retry=retry, claim_idle=0.05)
    new_handled = keeping(new, "order", version=4)
    async with new.running():
        await wait_for(lambda: len(new_handled) == 1, what="the new consumer handled it")
    assert new_handled[0].data == {"id": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"version": 0}, "version must be an int >= 1"),
        ({"version": 3, "upcast": {1: v1_to_v2}}, "upcast has no step from version 2 to 3"),
        ({"version": 2, "upcast": {2: v2_to_v3}}, "upcast key 2 must be a version from 1 to 1"),
        ({"version": 2, "upcast": {1: "not callable"}}, r"upcast\[1\] must be a function"),
        ({"upcast": [v1_to_v2]}, "upcast must be a dict"),
        (
            {"upcast": {1: v1_to_v2}},
            r"upcast needs version=, the handler's current version \(greater than every upcast "
            r"key\): version=2 for upcast=\{1: \.\.\.\}",
        ),
    ],
)
async def test_versions_that_cannot_be_are_refused_at_registration(
    make_queue: QueueFactory, options: dict[str, object], message: str
) -> None:
    mq = make_queue()
    with pytest.raises(ConfigError, match=message):
        keeping(mq, "order", **options)


async def test_one_type_gets_one_version(make_queue: QueueFactory) -> None:
    mq = make_queue()
    keeping(mq, "order", version=2, upcast={1: v1_to_v2})

    with pytest.raises(ConfigError, match="another handler of the type has version=2"):

        @mq.batch_handler("order", version=3, upcast=UPCASTS)
        async def store(msgs: list[Message[OrderV3]]) -> None: ...
