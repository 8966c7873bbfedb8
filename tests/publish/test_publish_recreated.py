"""A producer outlives its topic: the topic is terminated under it and perhaps re-created
with another partition count.

A producer keeps the topic's shape (its partition streams) for as long as it runs. Before,
its publishes went on into the streams of the old shape, which no consumer of the new topic
reads: lost, with no error. Every publish now adds with ``XADD ... NOMKSTREAM``; a stream
found missing makes the producer check the topic again before it creates the stream: a
``MessageQueue`` whose count no longer fits raises ConfigError, a ``Publisher`` that follows
the record (``partitions=None``) publishes to the new partitions.
"""

from __future__ import annotations

import functools

import anyio
import pytest

from streamq import ConfigError, MessageQueue, Publisher
from streamq.publish.plan import Fields, ManyPlan, choose_partition
from streamq.server import EmbeddedServer
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect_sync
from tests.helpers.recreated import lengths, recreate, unread

pytestmark = pytest.mark.anyio


async def test_a_queue_whose_topic_came_back_with_another_count_raises_and_loses_nothing(
    where: str, topic: str
) -> None:
    producer = MessageQueue(where, stream=topic, partitions=8)
    try:
        await producer.publish("job", 0)  # the shape is checked, the streams known
        consumers = await recreate(where, topic, old=8, new=4)
        try:
            published, refused = [], 0
            for n in range(40):
                try:
                    published.append(await producer.publish("job", n, key=f"k{n}"))
                except ConfigError as e:
                    assert "has 4 partitions" in str(e), e
                    refused += 1
            with pytest.raises(ConfigError, match="has 4 partitions"):
                await producer.publish_many("job", list(range(40)), key=lambda n: f"k{n}")
        finally:
            await consumers.aclose()
    finally:
        await producer.aclose()
    assert refused, "no publish noticed that the topic has 4 partitions now"
    assert unread(where, topic, old=8, new=4) == {}, "entries went where nobody reads"
    # a stream the two shapes share (same name) is read by the new consumers: not lost
    assert sum(lengths(where, partition_streams(topic, 4)).values()) == len(published)


async def test_a_plain_queue_does_not_publish_into_a_topic_re_created_partitioned(
    where: str, topic: str
) -> None:
    producer = MessageQueue(where, stream=topic)
    try:
        await producer.publish("job", 0)
        consumers = await recreate(where, topic, old=1, new=4)
        try:
            with pytest.raises(ConfigError, match="has 4 partitions"):
                await producer.publish("job", 1)
            with pytest.raises(ConfigError, match="has 4 partitions"):
                await producer.publish("job", 2, idempotency_key="once")
            with pytest.raises(ConfigError, match="has 4 partitions"):
                await producer.publish_many("job", [3, 4])
        finally:
            await consumers.aclose()
    finally:
        await producer.aclose()
    assert lengths(where, [topic]) == {topic: 0}, "the plain stream was made again"


async def test_a_publisher_follows_a_topic_re_created_with_another_count(
    where: str, topic: str
) -> None:
    with Publisher(where, stream=topic) as publisher:
        async with MessageQueue(where, stream=topic, partitions=8):
            pass  # the topic is recorded with 8 partitions
        first = await anyio.to_thread.run_sync(publisher.publish, "job", 0)
        assert first.startswith("0:")
        consumers = await recreate(where, topic, old=8, new=4)
        try:
            ids = [
                await anyio.to_thread.run_sync(
                    functools.partial(publisher.publish, "job", n, key=f"k{n}")
                )
                for n in range(20)
            ]
            many = await anyio.to_thread.run_sync(
                lambda: publisher.publish_many("job", list(range(20)), key=lambda n: f"m{n}")
            )
        finally:
            await consumers.aclose()
    assert {int(i.split(":")[0]) for i in ids + many} <= {0, 1, 2, 3}
    assert unread(where, topic, old=8, new=4) == {}
    assert sum(lengths(where, partition_streams(topic, 4)).values()) == 40


async def test_a_publisher_with_a_count_that_no_longer_fits_raises(where: str, topic: str) -> None:
    with Publisher(where, stream=topic, partitions=8) as publisher:
        await anyio.to_thread.run_sync(publisher.publish, "job", 0)
        consumers = await recreate(where, topic, old=8, new=2)
        try:
            for publish in (
                functools.partial(publisher.publish, "job", 1, key="a"),
                functools.partial(publisher.publish, "job", 1, replicas=1, timeout=0.1),
                functools.partial(publisher.publish, "job", 1, idempotency_key="i"),
            ):
                with pytest.raises(ConfigError, match="has 2 partitions"):
                    await anyio.to_thread.run_sync(publish)
        finally:
            await consumers.aclose()
    assert unread(where, topic, old=8, new=2) == {}


async def test_a_topic_terminated_and_not_re_created_is_made_again_by_its_producer(
    where: str, topic: str
) -> None:
    producer = MessageQueue(where, stream=topic, partitions=4)
    try:
        await producer.publish("job", 0)
        async with MessageQueue(where, stream=topic, partitions=4, group="g") as consumer:
            await consumer.terminate_topic()
        ids = [await producer.publish("job", n) for n in range(8)]
    finally:
        await producer.aclose()
    assert sorted(int(i.split(":")[0]) for i in ids) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sum(lengths(where, partition_streams(topic, 4)).values()) == 8
    with pytest.raises(ConfigError, match="has 4 partitions"):  # recorded again
        await MessageQueue(where, stream=topic, partitions=2).open()


def xadds_so_far(url: str, stream: str) -> int:
    """XADDs the node of ``stream`` has run."""
    deployment = connect_sync(url)
    try:
        stats = deployment.client_for(stream).info("commandstats")
        return int(stats.get("cmdstat_xadd", {}).get("calls", 0))
    finally:
        deployment.close()


async def test_publish_many_to_a_new_stream_sends_one_chunk_twice_at_most(stream: str) -> None:
    """The first chunk finds the stream missing; the rest are not sent in vain. On a server
    of its own: the XADDs are counted server-wide, and other tests' would count too."""
    with EmbeddedServer() as server:
        await publish_many_counting_xadds(server.url, stream)


async def publish_many_counting_xadds(redis_url: str, stream: str) -> None:
    mq = MessageQueue(redis_url, stream=stream)
    try:
        before = xadds_so_far(redis_url, stream)
        ids = await mq.publish_many("job", list(range(5000)), chunk=1000)
        sent = xadds_so_far(redis_url, stream) - before
    finally:
        await mq.aclose()
    assert sent <= 5000 + 1000, f"{sent} XADDs for 5,000 entries in chunks of 1,000"
    assert len(set(ids)) == 5000 and lengths(redis_url, [stream]) == {stream: 5000}
    other = f"{stream}-sync"
    try:
        with Publisher(redis_url, stream=other) as publisher:
            before = xadds_so_far(redis_url, other)
            many = await anyio.to_thread.run_sync(
                lambda: publisher.publish_many("job", list(range(5000)), chunk=1000)
            )
            sent = xadds_so_far(redis_url, other) - before
    finally:
        delete_stream_keys(redis_url, other)
    assert sent <= 5000 + 1000, f"{sent} XADDs for 5,000 entries in chunks of 1,000"
    assert len(set(many)) == 5000


def publish_many_with_one_partition_missing(where: str, topic: str, blocking: bool) -> list[str]:
    """One keyless publish, then the stream of partition 1 goes missing under the producer,
    then ``publish_many`` of four keyless items; the IDs it returns. Through the blocking
    Publisher or a MessageQueue (driven from this thread by ``anyio.run``)."""
    items = [1, 2, 3, 4]
    if blocking:
        with Publisher(where, stream=topic, partitions=2) as publisher:
            publisher.publish("job", 0)
            delete_stream_keys(where, partition_streams(topic, 2)[1])
            return publisher.publish_many("job", items)

    async def through_a_queue() -> list[str]:
        async with MessageQueue(where, stream=topic, partitions=2, group="g") as mq:
            await mq.publish("job", 0)
            delete_stream_keys(where, partition_streams(topic, 2)[1])
            return await mq.publish_many("job", items)

    return anyio.run(through_a_queue)


async def test_publish_many_with_a_partition_missing_does_the_same_in_both_twins(
    where: str, topic: str
) -> None:
    """Items whose partition's stream is missing are added to that same partition once
    the topic was checked again (its count unchanged), by MessageQueue and Publisher alike."""
    other = f"{topic}-blocking"
    try:
        outcomes = {}
        for blocking, name in ((False, topic), (True, other)):
            ids = await anyio.to_thread.run_sync(
                publish_many_with_one_partition_missing, where, name, blocking
            )
            in_streams = list(lengths(where, partition_streams(name, 2)).values())
            outcomes["Publisher" if blocking else "MessageQueue"] = (
                [entry_id.split(":")[0] for entry_id in ids],
                in_streams,
            )
    finally:
        for stream in partition_streams(other, 2):
            delete_stream_keys(where, stream)
    # in turn after the first publish (partition 0): 1, 0, 1, 0; partition 1 made again
    expected = (["1", "0", "1", "0"], [3, 2])
    assert outcomes == {"MessageQueue": expected, "Publisher": expected}, outcomes


def test_the_plan_of_publish_many_keeps_partitions_unless_the_count_changed() -> None:
    """What both twins decide alike after a missing stream, without a server: the items
    left keep their partition while the count holds, and are placed anew when it changed."""
    items = ["a", "b", "c", "d"]
    turns = iter(range(100)).__next__
    plan = ManyPlan(items, None, 2, lambda key: choose_partition(key, 2, turns))
    entries: list[Fields] = [{"data": item} for item in items]
    for send in plan.sends(("s0", "s1"), entries, 1, make_stream=False):
        for pipeline in send:
            send.take([None] * pipeline.count if send.partition == 1 else [b"1-1"] * pipeline.count)
    assert plan.found_missing
    plan.again(2, lambda key: 0)  # the same count: nobody is placed anew
    sent = [(send.partition, sum(p.count for p in send)) for send in plan.sends(
        ("s0", "s1"), entries, 10, make_stream=True
    )]  # fmt: skip
    assert sent == [(1, 2)], sent
    plan = ManyPlan(items, None, 2, lambda key: choose_partition(key, 2, turns))
    for send in plan.sends(("s0", "s1"), entries, 10, make_stream=False):
        for pipeline in send:
            send.take([None] * pipeline.count)
    plan.again(3, lambda key: 2)  # another count: every item left is placed anew
    for send in plan.sends(("s0", "s1", "s2"), entries, 10, make_stream=True):
        assert send.partition == 2
        for pipeline in send:
            send.take([b"2-%d" % n for n in range(pipeline.count)])
    assert plan.ids() == ["2:2-0", "2:2-1", "2:2-2", "2:2-3"]
