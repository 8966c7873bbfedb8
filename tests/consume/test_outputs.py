"""Outputs with the ack beyond the contract suite (docs/guides/effects.md "Outputs with the
ack"): a hand-built Message refuses to stage; outputs are encoded as ``publish`` encodes
them (the queue's payload settings); the write script adds an entry's outputs only with
the ack that takes it out of the pending list (a flush sent again, a second run); on a
cluster, outputs for another slot go through the outbox and are forwarded once, also when
a forwarder died between forwarding and deleting."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, MessageQueue, StartFrom, WrongTypeError
from streamq.consume.forwarding import Forwarder
from streamq.consume.outputs import Output, OutputWriter
from streamq.consume.stats import Stats
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.wire import outputs as wire
from streamq.wire import resp
from streamq.wire.client import connect
from streamq.wire.keys import Keys
from streamq.wire.ownership import lease_key
from streamq.wire.slots import slot_of
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def test_a_message_built_by_hand_refuses_to_stage_outputs() -> None:
    msg = Message("1-0", "order", 1, {}, 1, "orders", "g")
    with pytest.raises(ConfigError, match="inside a handler of a consumer group"):
        msg.publish("shipped", 1)


async def test_outputs_are_encoded_with_the_queues_payload_settings(
    make_queue: QueueFactory, stream: str, client: aioredis.Redis
) -> None:
    mq = make_queue(compression="gzip", compress_over=10)
    big = {"text": "x" * 500}

    @mq.handler("order")
    async def order(msg: Message[Any]) -> None:
        msg.publish("shipped", big)

    seen: list[Any] = []

    @mq.handler("shipped")
    async def shipped(msg: Message[Any]) -> None:
        seen.append(msg.data)

    async with mq.running():
        await mq.publish("order", {})
        await wait_for(lambda: seen == [big], what="the output handled, decoded")
    (row,) = [f for _, f in await client.xrange(stream) if f[b"type"] == b"shipped"]
    assert row[b"enc"] == b"gzip"


@pytest.fixture
def target(stream: str, redis_url: str) -> Iterator[str]:
    """A target on the source's slot (these tests also run on a cluster), its own keys
    with it: a plain name, found by trying suffixes."""
    n = 0
    while slot_of(f"{stream}-out{n}") != slot_of(stream):
        n += 1
    name = f"{stream}-out{n}"
    yield name
    delete_stream_keys(redis_url, name)


async def test_a_write_sent_again_or_by_a_second_run_adds_nothing(
    client: aioredis.Redis, stream: str, target: str
) -> None:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry_id = (await client.xadd(stream, {"type": "order", "data": "1"})).decode()
    await client.xreadgroup("g", "c", {stream: ">"})
    writer = OutputWriter(client, stream, "g", cluster=lambda: False)
    staged = [(entry_id, [Output(target, {"type": "shipped", "data": "1"})])]
    assert await writer.write(staged, None)
    assert await writer.write(staged, None)  # a lost reply's flush, or another run's
    assert await client.xlen(target) == 1
    assert (await client.xpending(stream, "g"))["pending"] == 0


# -- a cluster: the outbox -------------------------------------------------------------
@pytest.fixture
def cluster_topic(streamq_cluster_url: str) -> Iterator[tuple[str, str, str]]:
    """A source stream and a target stream on another slot of the embedded cluster."""
    source = f"test-{os.urandom(5).hex()}"
    n = 0
    while slot_of(f"{source}-out{n}") == slot_of(source):
        n += 1
    target = f"{source}-out{n}"
    yield streamq_cluster_url, source, target
    for name in (source, target):
        delete_stream_keys(streamq_cluster_url, name)


def _queue(url: str, source: str, consumer: str) -> MessageQueue:
    return MessageQueue(url, stream=source, group="g", consumer=consumer, config=TEST_TIMINGS,
                        start=StartFrom.EARLIEST)  # fmt: skip


def _numbers(rows: list[Any]) -> Counter[int]:
    return Counter(json.loads(fields[b"data"]) for _, fields in rows)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_on_a_cluster_outputs_for_another_slot_are_forwarded_once(
    cluster_topic: tuple[str, str, str],
) -> None:
    url, source, target = cluster_topic
    mq = _queue(url, source, "c1")
    own: list[int] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        msg.publish("shipped", msg.data, stream=target)  # another slot: through the outbox
        msg.publish("audit", msg.data)  # the stream's own slot: written directly

    @mq.handler("audit")
    async def audit(msg: Message[int]) -> None:
        own.append(msg.data)

    deployment = connect(url)
    try:
        async with mq.running():
            await mq.publish_many("order", list(range(30)))
            await wait_for(lambda: len(own) == 30, what="the own-slot outputs handled")
            target_client = deployment.client_for(target)

            async def all_forwarded() -> bool:
                return int(await target_client.xlen(target)) == 30

            await wait_for(all_forwarded, what="30 outputs forwarded")
            await wait_for(lambda: mq.stats()["forwarded"] == 30, what="counted")
            assert (await mq.topic_info()).outbox == 0
        assert _numbers(await target_client.xrange(target)) == Counter(range(30))
        assert await target_client.zcard(Keys(target).forwarded) == 30
    finally:
        await deployment.aclose()


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_an_output_its_target_refuses_stays_in_the_outbox_until_it_can_be_added(
    cluster_topic: tuple[str, str, str],
) -> None:
    """A target that holds another type (a string) refuses the forwarded XADD: the output
    stays in the outbox, not marked as forwarded, and is added once the name is a stream's
    again; the outputs for it before and after, in their order."""
    url, source, target = cluster_topic
    deployment = connect(url)
    try:
        target_client, source_client = deployment.client_for(target), deployment.client_for(source)
        await target_client.set(target, "not a stream")
        forwarder = Forwarder(deployment.client_for, [source], Stats())
        for n in range(3):
            await source_client.xadd(Keys(source).outbox, {
                "target": target, "source": source, "entry": f"1-{n}", "index": "0",
                "type": "shipped", "data": str(n),
            })  # fmt: skip
        with pytest.raises(WrongTypeError):
            await forwarder.forward(source)
        assert await source_client.xlen(Keys(source).outbox) == 3
        assert await target_client.zcard(Keys(target).forwarded) == 0
        await target_client.delete(target)
        assert await forwarder.forward(source) == 3
        assert [json.loads(f[b"data"]) for _, f in await target_client.xrange(target)] == [0, 1, 2]
        assert await source_client.xlen(Keys(source).outbox) == 0
    finally:
        await deployment.aclose()


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_what_a_dead_forwarder_left_is_forwarded_once_by_another_consumer(
    cluster_topic: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, source, target = cluster_topic
    run = Forwarder.run

    async def dead(self: Forwarder) -> None:  # the first consumer never forwards
        return None

    monkeypatch.setattr(Forwarder, "run", dead)
    first = _queue(url, source, "c1")

    @first.handler("order")
    async def order(msg: Message[int]) -> None:
        msg.publish("shipped", msg.data, stream=target)

    deployment = connect(url)
    try:
        source_client, target_client = deployment.client_for(source), deployment.client_for(target)
        async with first.running():
            await first.publish_many("order", list(range(10)))

            async def outboxed() -> bool:
                return (await first.topic_info()).outbox == 10

            await wait_for(outboxed, what="10 outputs in the outbox")
        assert await target_client.exists(target) == 0
        # a forwarder that died mid-way: the first three forwarded, not yet deleted from
        # the outbox; the fourth forwarded and deleted
        rows = await source_client.xrange(Keys(source).outbox)
        forwarder = Forwarder(deployment.client_for, [source], Stats())
        for _, fields in rows[:3]:
            name = wire.output_name(source, fields[b"entry"].decode(), fields[b"index"].decode())
            rest = [v for pair in list(fields.items())[4:] for v in pair]
            args = [str(wire.DEDUPE_WINDOW_MS), *wire.forward_args([(name, rest)])]
            keys = [target, Keys(target).forwarded]
            await resp.run_script(target_client, wire.FORWARD, keys, args, target)
        await forwarder._forward_page(source_client, Keys(source).outbox, rows[3:4])
        monkeypatch.setattr(Forwarder, "run", run)
        second = _queue(url, source, "c2")
        second.handler("order")(order)
        async with second.running():

            async def drained() -> bool:
                return (await second.topic_info()).outbox == 0

            await wait_for(drained, what="the outbox forwarded")
            assert second.stats()["forwarded"] == 6  # the 3 left undeleted were deduplicated
        assert _numbers(await target_client.xrange(target)) == Counter(range(10))
    finally:
        await deployment.aclose()


async def test_a_stale_owners_outputs_and_ack_are_refused(
    client: aioredis.Redis, stream: str, target: str
) -> None:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry_id = (await client.xadd(stream, {"type": "order", "data": "1"})).decode()
    await client.xreadgroup("g", "old-owner", {stream: ">"})
    lease = lease_key(stream, "g")
    await client.hset(
        lease, mapping={"consumer": "new-owner", "token": "8", "expires": "1" + "0" * 14}
    )
    writer = OutputWriter(client, stream, "g", cluster=lambda: False)
    staged = [(entry_id, [Output(target, {"type": "shipped", "data": "1"})])]
    assert not await writer.write(staged, (lease, "old-owner", "7"))
    assert await client.exists(target) == 0
    assert (await client.xpending(stream, "g"))["pending"] == 1
    assert await writer.write(staged, (lease, "new-owner", "8"))
    assert await client.xlen(target) == 1


async def test_a_damaged_outbox_entry_is_left_and_the_others_forwarded(
    client: aioredis.Redis, stream: str, target: str, redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    outbox = Keys(stream).outbox
    await client.xadd(outbox, {"junk": "1"})
    await client.xadd(outbox, {"target": target, "source": stream, "entry": "1-0", "index": "0",
                               "type": "shipped", "data": "1"})  # fmt: skip
    deployment = connect(redis_url)
    try:
        stats = Stats()
        assert await Forwarder(deployment.client_for, [stream], stats).forward(stream) == 1
    finally:
        await deployment.aclose()
    assert stats.forwarded == 1
    assert await client.xlen(target) == 1
    assert [f for _, f in await client.xrange(outbox)] == [{b"junk": b"1"}]
    assert "damaged outbox record" in caplog.text
