"""The blocking Publisher publishes what ``MessageQueue.publish`` publishes: to the
partitions of a partitioned topic (its recorded count, or one given and checked), by key or
in turn, idempotently, durably. On one node and on the session's embedded cluster."""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections import Counter

import pytest
import redis

from streamq import (
    ConfigError,
    EmbeddedCluster,
    Message,
    MessageFormatError,
    MessageQueue,
    NotReplicatedError,
    Publisher,
    TypedPublisher,
)
from streamq.publish.options import PublishOptions
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import PartitionedId, partition_for_key, partition_streams
from streamq.wire.timeouts import SOCKET_TIMEOUT
from tests.helpers.clients import sync_client
from tests.helpers.queues import queue
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def partition_of(entry_id: str) -> int:
    return PartitionedId.parse(entry_id, 4).partition


async def test_a_publisher_publishes_to_the_partitions_a_consumer_reads(
    where: str, topic: str
) -> None:
    mq = queue(where, topic, partitions=4)
    seen: list[Message[dict[str, int]]] = []

    @mq.handler("order")
    async def order(msg: Message[dict[str, int]]) -> None:
        seen.append(msg)

    async with mq:
        by_queue = {k: partition_of(await mq.publish("order", {"n": -1}, key=k)) for k in "abc"}
        with Publisher(where, stream=topic) as publisher:  # the count: the topic's record
            in_turn = [publisher.publish("order", {"n": n}) for n in range(8)]
            keyed = {k: publisher.publish("order", {"n": 10}, key=k) for k in "abc"}
            same_key = publisher.publish_many("order", [{"n": 20}, {"n": 21}], key=b"a")
            items = [{"n": n} for n in range(6)]
            by_item = publisher.publish_many("order", items, key=lambda item: str(item["n"]))
        async with mq.running():
            await wait_for(lambda: len(seen) == 22, what="every message published")
    assert Counter(map(partition_of, in_turn)) == dict.fromkeys(range(4), 2)
    assert {k: partition_of(i) for k, i in keyed.items()} == by_queue
    assert {partition_of(i) for i in same_key} == {partition_for_key("a", 4)}
    assert [partition_of(i) for i in by_item] == [partition_for_key(str(n), 4) for n in range(6)]
    handled = {m.id for m in seen}
    assert handled >= {*in_turn, *keyed.values(), *same_key, *by_item}


def test_threads_take_the_partitions_in_turn(where: str, topic: str) -> None:
    with Publisher(where, stream=topic, partitions=4) as publisher:
        ids: list[str] = []

        def publish() -> None:
            ids.extend(publisher.publish("job", n) for n in range(50))

        threads = [threading.Thread(target=publish) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert Counter(map(partition_of, ids)) == dict.fromkeys(range(4), 100)


async def test_a_publisher_records_the_count_it_is_given(where: str, topic: str) -> None:
    with Publisher(where, stream=topic, partitions=4) as publisher:
        first = publisher.publish("job", 1)
    assert partition_of(first) == 0
    async with queue(where, topic, partitions=4) as mq:  # the same count: accepted
        assert (await mq.topic_info()).length == 1
    with pytest.raises(ConfigError, match="has 4 partitions"):
        await queue(where, topic, partitions=2).open()


async def test_another_count_or_a_plain_stream_is_refused(where: str, topic: str) -> None:
    async with queue(where, topic, partitions=4):
        pass
    refused = pytest.raises(ConfigError, match=r"has 4 partitions .* not 2: pass partitions=4")
    with Publisher(where, stream=topic, partitions=2) as publisher, refused:
        publisher.publish("job", 1)
    plain = f"{topic}-plain"
    try:
        with sync_client(where, plain) as client:
            client.xadd(plain, {"x": "1"})
        with Publisher(where, stream=plain, partitions=2) as publisher:
            with pytest.raises(ConfigError, match=r"partitions=2, but .* is a plain stream"):
                publisher.publish("job", 1)
            with sync_client(where, plain) as client:
                assert client.xlen(plain) == 1, "nothing published"
    finally:
        delete_stream_keys(where, plain)


def test_the_constructor_does_no_io_and_checks_its_arguments() -> None:
    nobody = "redis://127.0.0.1:1/0"  # no server: the first publish would fail
    Publisher(nobody, stream="s", partitions=4).close()
    with pytest.raises(ConfigError, match="partitions must be between"):
        Publisher(nobody, stream="s", partitions=0)


def test_bad_options_raise_as_the_async_publish_does(redis_url: str, stream: str) -> None:
    with Publisher(redis_url, stream=stream) as publisher:
        with pytest.raises(ConfigError, match="key must be str or bytes"):
            publisher.publish("job", 1, key=5)  # type: ignore[arg-type]
        with pytest.raises(MessageFormatError, match="idempotency_key"):
            publisher.publish("job", 1, idempotency_key="")
        with pytest.raises(ConfigError, match="replicas"):
            publisher.publish("job", 1, replicas=-1)
        with pytest.raises(ConfigError, match="timeout"):
            publisher.publish("job", 1, replicas=1, timeout=-1)
        with sync_client(redis_url, stream) as client:
            assert client.xlen(stream) == 0


def test_every_publish_takes_the_options_of_publish_options() -> None:
    """The blocking and the asyncio publish (and a typed publisher's) take one set of
    options, with one set of defaults: those of PublishOptions, which they all build."""
    options = PublishOptions()
    expected = [(name, getattr(options, name)) for name in PublishOptions._fields]
    for publish in (Publisher.publish, MessageQueue.publish, TypedPublisher.publish):
        params = inspect.signature(publish).parameters.values()
        keywords = [(p.name, p.default) for p in params if p.kind is p.KEYWORD_ONLY]
        assert keywords == expected, publish.__qualname__


def test_a_scheduled_publish_refuses_the_options_of_an_immediate_one(
    redis_url: str, stream: str
) -> None:
    with Publisher(redis_url, stream=stream) as publisher:
        with pytest.raises(ConfigError, match="fsync, idempotency_key, replicas cannot be"):
            publisher.publish("job", 1, delay=5, replicas=1, fsync=True, idempotency_key="k")
        with pytest.raises(ConfigError, match="replicas cannot be combined"):
            publisher.publish("job", 1, schedule_id="s", replicas=1)
        with sync_client(redis_url, stream) as client:
            assert client.xlen(stream) == 0


@pytest.mark.parametrize("partitions", [None, 4], ids=["plain", "partitioned"])
def test_an_idempotency_key_used_again_returns_the_first_entry(
    where: str, topic: str, partitions: int | None
) -> None:
    with Publisher(where, stream=topic, partitions=partitions) as publisher:
        first = publisher.publish("job", 1, key="k", idempotency_key="order-42")
        again = publisher.publish("job", 1, key="k", idempotency_key="order-42")
        other = publisher.publish("job", 2, key="k", idempotency_key="order-43")
    assert again == first != other
    count = partitions or 1
    stream = partition_streams(topic, count)[partition_for_key("k", count)]
    with sync_client(where, stream) as client:
        assert client.xlen(stream) == 2


def test_a_retry_without_a_message_key_finds_its_idempotency_key(where: str, topic: str) -> None:
    """Keyless publishes take the partitions in turn; the idempotency key picks the
    partition instead, so a retry goes where the first publish went."""
    with Publisher(where, stream=topic, partitions=4) as publisher:
        ids = [publisher.publish("job", 1, idempotency_key="order-42") for _ in range(5)]
    assert ids == [ids[0]] * 5
    assert partition_of(ids[0]) == partition_for_key("order-42", 4)


def test_a_durable_publish_without_a_replica_is_not_replicated(where: str, topic: str) -> None:
    """The session's servers have no replica: the entry is added, WAIT times out."""
    with Publisher(where, stream=topic, partitions=4) as publisher:
        started = time.monotonic()
        with pytest.raises(NotReplicatedError, match="reached 0 of 1 replica") as failure:
            publisher.publish("job", 1, key="k", replicas=1, timeout=0.2)
        assert time.monotonic() - started < 2
        entry = failure.value.entry_id
        assert partition_of(entry) == partition_for_key("k", 4) and failure.value.replicas == 0
        with pytest.raises(NotReplicatedError) as again:
            publisher.publish("job", 1, key="k", replicas=1, timeout=0.2, idempotency_key="i")
        assert again.value.entry_id != entry
        repeated = publisher.publish("job", 1, key="k", idempotency_key="i")
        assert repeated == again.value.entry_id, "the durable publish remembered its key"
    stream = partition_streams(topic, 4)[partition_for_key("k", 4)]
    with sync_client(where, stream) as client:
        ids = [i.decode() for i, _ in client.xrange(stream)]
    assert ids == [entry.split(":", 1)[1], repeated.split(":", 1)[1]]


@pytest.mark.slow
@pytest.mark.parametrize("fsync", [False, True], ids=["written", "fsynced"])
def test_a_durable_publish_returns_once_the_replica_has_the_entry(
    pair: EmbeddedCluster, replica: redis.Redis, fsync: bool
) -> None:
    if fsync:
        replica.config_set("appendfsync", "always")
    topic = f"test-{os.urandom(5).hex()}"
    with Publisher(pair.url, stream=topic, partitions=2) as publisher:
        entry = publisher.publish("job", 1, key="k", replicas=1, timeout=5, fsync=fsync)
        again = publisher.publish("job", 1, key="k", replicas=1, idempotency_key="i")
    stream = partition_streams(topic, 2)[partition_for_key("k", 2)]
    ids = [f"{partition_for_key('k', 2)}:{i.decode()}" for i, _ in replica.xrange(stream)]
    assert ids == [entry, again]


@pytest.mark.slow
def test_a_durable_publish_waits_longer_than_the_socket_timeout(
    redis_url: str, stream: str
) -> None:
    """WAIT holds its reply for ``timeout``: the read waits that long, not SOCKET_TIMEOUT."""
    wait = SOCKET_TIMEOUT + 0.5
    with Publisher(redis_url, stream=stream) as publisher:
        started = time.monotonic()
        with pytest.raises(NotReplicatedError):
            publisher.publish("job", 1, replicas=1, timeout=wait)
        assert wait <= time.monotonic() - started < wait + 2
        assert publisher.publish("job", 2), "the connection is usable again"
