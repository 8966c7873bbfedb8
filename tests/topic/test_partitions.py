"""Partitioned topics on one node and on an embedded cluster: keys keep their order, IDs name
their partition, every feature works across partitions, and the partitions spread over the
cluster's masters."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections import defaultdict

import anyio
import pytest

from streamq import (
    ConfigError,
    InvalidMessageIdError,
    Message,
    MessageQueue,
    NotReplicatedError,
)
from streamq._ids import StreamId
from streamq.consume.pool import WORKER_TASK
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.topic.partitions import (
    PartitionedId,
    check_partition_count_sync,
    partition_for_key,
    partition_streams,
)
from streamq.wire.client import connect_sync
from streamq.wire.keys import Keys
from streamq.wire.slots import SLOTS, slot_of
from tests.helpers.clients import sync_client
from tests.helpers.queues import ok_and_poison
from tests.helpers.queues import queue as shared_queue
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def queue(url: str, topic: str, partitions: int = 4, **options: object) -> MessageQueue:
    """The suite's queue (tests/helpers/queues.py) on ``topic``, of 4 partitions unless told."""
    return shared_queue(url, topic, partitions=partitions, **options)


async def test_keys_keep_their_order_and_ids_name_their_partition(where: str, topic: str) -> None:
    mq = queue(where, topic)
    seen: list[Message[dict[str, int]]] = []

    @mq.handler("order")
    async def order(msg: Message[dict[str, int]]) -> None:
        seen.append(msg)

    async with mq:
        published: dict[str, list[str]] = defaultdict(list)
        for n in range(40):
            customer = f"customer-{n % 5}"
            published[customer].append(await mq.publish("order", {"n": n}, key=customer))
        many = await mq.publish_many("order", [{"n": 100 + n} for n in range(20)], key=str)
        async with mq.running():
            await wait_for(lambda: len(seen) == 60, what="60 handled")
    for customer, ids in published.items():
        index = partition_for_key(customer, 4)
        assert {PartitionedId.parse(i, 4).partition for i in ids} == {index}
        handled = [m.id for m in seen if m.id in set(ids)]
        assert handled == ids, f"{customer}: handled out of publish order"
    by_id = {m.id: m for m in seen}
    for entry_id in [*many, *(i for ids in published.values() for i in ids)]:
        message = by_id[entry_id]  # str(msg.id) == the ID publish returned
        assert message.partition == int(entry_id.split(":")[0]) and message.stream == topic
    assert len({m.partition for m in seen}) > 1


async def test_a_stopped_consumer_is_idle_on_every_partition_it_read_nothing_from(
    where: str, topic: str
) -> None:
    """The consumer handles one entry (one partition) and stops: ``topic_info()`` says it
    has been idle since, not ``-1`` (the server's "never read anything" of the partitions it
    read nothing from)."""
    mq = queue(where, topic)
    handled = ok_and_poison(mq)
    async with mq:
        await mq.publish("ok", 1, key="k")
        async with mq.running():
            await wait_for(lambda: len(handled) == 1, what="the one entry handled")
        await anyio.sleep(1.0)
        (consumer,) = (await mq.topic_info()).group("g").consumers
    assert consumer.idle_ms >= 900, f"a consumer stopped a second ago: {consumer}"


async def test_dead_letters_count_is_the_oldest_of_the_whole_topic(where: str, topic: str) -> None:
    """``dead_letters(count=3)`` on 4 partitions: the 3 oldest of the topic, oldest first,
    not 3 of each partition."""
    mq = queue(where, topic)
    ok_and_poison(mq)
    async with mq:
        bad = [await mq.publish("poison", n, key=f"k{n}") for n in range(8)]
        assert len({PartitionedId.parse(i, 4).partition for i in bad}) > 1
        async with mq.running():
            await wait_for(lambda: mq.stats().get("dead_lettered") == 8, what="8 dead letters")
        letters = await mq.dead_letters(count=3)
        every = await mq.dead_letters()
    assert len(letters) == 3 and len(every) == 8
    assert letters == every[:3], "not the oldest three"
    times = [StreamId.parse(letter.id.split(":")[1]) for letter in every]
    assert times == sorted(times), "not oldest first"


async def test_a_replayed_entry_names_its_original_with_the_partition(
    where: str, topic: str
) -> None:
    """The replay note (``meta["replayed_from"]``) names the original entry as the topic's
    Message IDs do, with its partition: the letter's ``original_id``."""
    mq = queue(where, topic)
    ok_and_poison(mq)
    async with mq:
        await mq.publish("poison", 0, key="k")
        async with mq.running():
            await wait_for(lambda: mq.stats().get("dead_lettered") == 1, what="a dead letter")
        (letter,) = await mq.dead_letters()
        (again,) = await mq.replay_dead_letter(letter.id)
        index, raw = again.split(":")
        with connect_sync(where).client_for(mq.streams[int(index)]) as sync:
            ((_, fields),) = sync.xrange(mq.streams[int(index)], raw, raw)
    assert json.loads(fields[b"meta"])["replayed_from"] == letter.original_id


async def test_stop_resume_dead_letters_info_seek_cleanup_and_terminate(
    where: str, topic: str
) -> None:
    mq = queue(where, topic)
    handled = ok_and_poison(mq)

    async with mq:
        ids = await mq.publish_many("ok", range(12))  # keyless: the partitions in turn
        assert {PartitionedId.parse(i, 4).partition for i in ids} == {0, 1, 2, 3}
        bad = await mq.publish("poison", 0, key="k")
        await mq.stop_message(ids[5])
        assert await mq.stopped_messages() == [ids[5]]
        async with mq.running():
            await wait_for(lambda: len(handled) == 11, what="all but the stopped one")
            await wait_for(lambda: mq.stats().get("dead_lettered") == 1, what="a dead letter")
            await mq.resume_message(ids[5])
            await wait_for(lambda: ids[5] in handled, what="the resumed entry")
            (letter,) = await mq.dead_letters()
            assert letter.original_id == bad and letter.id.startswith(bad.split(":")[0] + ":")
            (again,) = await mq.replay_dead_letter(letter.id)
            assert again.split(":")[0] == bad.split(":")[0]
            await wait_for(lambda: mq.stats().get("acked") == 14, what="dead again, all acked")
            info = await mq.topic_info()
            assert (info.length, info.pending, len(info.partitions)) == (14, 0, 4)
            assert sum(row.length for row in info.partitions) == 14
            assert all(row.node and row.stream.startswith(f"{topic}:p") for row in info.partitions)
            assert info.group("g").lag == 0
        await mq.seek("0")
        assert (await mq.topic_info()).group("g").lag == 14
        await mq.seek("$")
        assert await mq.purge_dead_letters() == 1
        with pytest.raises(InvalidMessageIdError, match="names its partition"):
            await mq.stop_message(ids[0].split(":")[1])
        await mq.terminate_topic()
        assert not (await mq.topic_info()).exists
    for stream in (*mq.streams, topic):  # all gone but the expiring "terminated" marks
        with connect_sync(where).client_for(stream, owner=True) as raw:
            left = raw.keys(f"{stream}*") + raw.keys(f"{Keys(stream).prefix}*")
            assert left in ([], [f"{Keys(stream).prefix}terminated".encode()]), left


async def test_a_running_consumer_of_every_partition_stops_on_terminate(
    where: str, topic: str
) -> None:
    mq = queue(where, topic)

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        pass

    async with mq.running():
        await mq.publish_many("ok", range(8))
        async with queue(where, topic, consumer="operator") as operator:
            await operator.terminate_topic()
        await wait_for(lambda: mq.done.is_set(), what="every partition's consumer stopped")
    assert mq.stop_reason == "topic_terminated"


async def test_opening_with_another_count_or_a_bad_key_is_a_config_error(
    where: str, topic: str
) -> None:
    async with queue(where, topic, partitions=4) as mq:
        await mq.publish("ok", 1)
        with pytest.raises(ConfigError, match="key must be str or bytes"):
            await mq.publish("ok", 1, key=7)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has 4 partitions"):
        await queue(where, topic, partitions=8).open()
    with pytest.raises(ConfigError, match="has 4 partitions"):
        await MessageQueue(where, stream=topic).open()  # a plain queue on it
    for bad in (0, -1, "4", True):
        with pytest.raises(ConfigError, match="partitions must be"):
            queue(where, topic, partitions=bad)  # type: ignore[arg-type]


async def test_a_plain_stream_cannot_become_partitioned(where: str, topic: str) -> None:
    async with MessageQueue(where, stream=topic) as plain:
        await plain.publish("ok", 1)
    with pytest.raises(ConfigError, match="is a plain stream"):
        await queue(where, topic, partitions=4).open()


def test_partition_names_are_balanced_over_slots_and_stable() -> None:
    names = partition_streams("orders", 8)
    assert names == partition_streams("orders", 8) and len(set(names)) == 8
    for i, name in enumerate(names):
        assert i * SLOTS // 8 <= slot_of(name) < (i + 1) * SLOTS // 8
        assert name.startswith(f"orders:p{i}.") and "{" not in name


@pytest.mark.slow
async def test_partitions_spread_over_the_cluster_masters(streamq_cluster_url: str) -> None:
    name = f"test-{os.urandom(5).hex()}"
    try:
        async with queue(streamq_cluster_url, name, partitions=6) as mq:
            info = await mq.topic_info()
            nodes = {row.node for row in info.partitions}
            assert len(nodes) == 3, f"6 partitions on {nodes}"
    finally:
        for stream in (*partition_streams(name, 6), name):
            delete_stream_keys(streamq_cluster_url, stream)


@pytest.mark.slow
async def test_the_cli_operates_a_partitioned_topic(where: str, topic: str) -> None:
    from tests.helpers.cli import streamq

    async with queue(where, topic) as mq:
        await mq.publish_many("ok", range(8))
    published = streamq("publish", topic, "ok", "1", "--key", "customer-7", url=where)
    assert published.returncode == 0, published.stderr
    assert PartitionedId.parse(published.stdout.strip(), 4).partition == partition_for_key(
        "customer-7", 4
    )
    info = streamq("info", topic, url=where)
    assert info.returncode == 0, info.stderr
    assert "length        9" in info.stdout
    rows = [line.split() for line in info.stdout.splitlines() if line.startswith(tuple("0123"))]
    assert [row[1] for row in rows] == list(partition_streams(topic, 4))
    assert all(":" in row[2] for row in rows)  # each partition's node, host:port
    for stream in partition_streams(topic, 4):  # one entry of each partition read, not acked
        with sync_client(where, stream) as client:
            client.xreadgroup("g", "reader", {stream: ">"}, count=1)
    pending = streamq("pending", topic, "g", url=where)
    assert pending.returncode == 0, pending.stderr
    listed = {line.split()[0].split(":")[0] for line in pending.stdout.splitlines()[1:]}
    assert listed == {"0", "1", "2", "3"}, pending.stdout  # "<partition>:<id>", every one
    assert streamq("terminate", topic, "--yes", url=where).returncode == 0
    assert streamq("info", topic, url=where).returncode != 0


async def test_metrics_have_a_series_per_partition(where: str, topic: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from streamq.metrics import QueueCollector

    async with queue(where, topic) as mq:
        ids = await mq.publish_many("ok", range(10))
        registry = CollectorRegistry()
        collector = QueueCollector(mq)
        registry.register(collector)
        text = generate_latest(registry).decode()
        collector.close()
    per_partition: defaultdict[str, int] = defaultdict(int)
    for entry_id in ids:
        per_partition[mq.streams[int(entry_id.split(":")[0])]] += 1
    for stream, count in per_partition.items():
        assert f'streamq_stream_length{{stream="{stream}"}} {float(count)}' in text
        assert f'streamq_group_lag{{group="g",stream="{stream}"}} {float(count)}' in text


async def test_a_durable_publish_not_replicated_names_the_partition_of_its_entry(
    where: str, topic: str
) -> None:
    mq = queue(where, topic)
    seen: list[str] = []

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        seen.append(msg.id)

    async with mq:  # no replica anywhere here: WAIT reaches 0 of 1
        with pytest.raises(NotReplicatedError) as caught:
            await mq.publish("ok", 1, key="customer-7", replicas=1, timeout=0.01)
        entry_id = caught.value.entry_id
        assert PartitionedId.parse(entry_id, 4).partition == partition_for_key("customer-7", 4)
        async with mq.running():
            await wait_for(lambda: bool(seen), what="the unconfirmed entry handled")
    assert seen == [entry_id], "the error's entry_id is not the ID the consumer sees"


async def test_every_partition_is_read_to_the_end_when_the_budget_runs_full(
    where: str, topic: str
) -> None:
    # The readers of 6 partitions share a budget of 12 in flight: they wait for room
    # together, over and over; none may be left waiting when room comes back.
    tight = dataclasses.replace(TEST_TIMINGS, max_in_flight=12, read_count=8, concurrency=4)
    mq = queue(where, topic, partitions=6, config=tight)
    total, handled, everything = 3000, set[str](), anyio.Event()

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        handled.add(msg.id)
        if len(handled) == total:
            everything.set()

    async with mq:
        ids = await mq.publish_many("ok", range(total))
        with anyio.move_on_after(30):  # a stalled reader would also hang the stop: cancel
            async with mq.running():
                await everything.wait()
    assert handled == set(ids), (
        f"{len(set(ids) - handled)} of {total} never handled: a partition's reader stalled"
    )


async def test_health_sums_the_group_over_partitions(where: str, topic: str) -> None:
    mq = queue(where, topic)

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        pass

    async with mq:
        await mq.publish_many("ok", range(6))
        report = await mq.health()
    assert (report["connected"], report["pending"], report["lag"]) == (True, 0, 6), report
    assert "error" not in report


async def test_the_record_gets_its_names_after_an_open_that_failed_between_two_writes(
    where: str, topic: str
) -> None:
    """The count and the names are two writes: an open that died between them (a failover)
    must not leave the record without its names for good."""
    key = Keys(topic).partitions
    expected = partition_streams(topic, 4)
    async with queue(where, topic) as mq:
        assert json.loads(await mq.client.hget(key, "names")) == list(expected)
        await mq.client.hdel(key, "names")
    async with queue(where, topic) as mq:
        assert json.loads(await mq.client.hget(key, "names")) == list(expected)
        await mq.client.hdel(key, "names")
    deployment = connect_sync(where)
    try:
        client = deployment.client_for(topic)
        check_partition_count_sync(client, topic, 4)
        assert json.loads(client.hget(key, "names")) == list(expected)
    finally:
        deployment.close()


def worker_tasks() -> int:
    """The consumer worker tasks running in this process (named by streamq)."""
    return sum(task.get_name() == WORKER_TASK for task in asyncio.all_tasks())


async def test_a_partitioned_consumer_runs_one_pool_of_workers_for_every_partition(
    where: str, topic: str
) -> None:
    config = dataclasses.replace(TEST_TIMINGS, concurrency=4)
    mq = queue(where, topic, partitions=8, config=config)
    total, handled, everything = 400, set[str](), anyio.Event()

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        handled.add(msg.id)
        await anyio.sleep(0.001)
        if len(handled) == total:
            everything.set()

    async with mq:
        ids = await mq.publish_many("ok", range(total), key=str)
        with anyio.fail_after(30):
            async with mq.running():
                await everything.wait()
                workers = worker_tasks()
    assert workers == 4, f"{workers} worker tasks for 8 partitions at concurrency 4"
    assert handled == set(ids)
    assert {PartitionedId.parse(i, 8).partition for i in handled} == set(range(8))
    assert worker_tasks() == 0


async def test_concurrency_one_over_partitions_never_runs_two_handlers_at_once(
    where: str, topic: str
) -> None:
    config = dataclasses.replace(TEST_TIMINGS, concurrency=1)
    mq = queue(where, topic, partitions=4, config=config)
    total, running, most, handled, everything = 80, 0, 0, set[str](), anyio.Event()

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.001)
        running -= 1
        handled.add(msg.id)
        if len(handled) == total:
            everything.set()

    async with mq:
        await mq.publish_many("ok", range(total), key=str)
        with anyio.fail_after(30):
            async with mq.running():
                await everything.wait()
    assert most == 1, f"{most} handlers ran at once at concurrency 1"
    assert {PartitionedId.parse(i, 4).partition for i in handled} == set(range(4))


async def test_a_stop_notice_cancels_only_its_entry_on_the_shared_workers(
    where: str, topic: str
) -> None:
    config = dataclasses.replace(TEST_TIMINGS, concurrency=4)
    mq = queue(where, topic, partitions=4, config=config)
    started, cancelled, release = set[str](), list[str](), anyio.Event()

    @mq.handler("slow")
    async def slow(msg: Message[int]) -> None:
        started.add(msg.id)
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise

    async with mq:
        ids = await mq.publish_many("slow", range(4))  # one per partition, all running
        async with mq.running():
            await wait_for(lambda: started == set(ids), what="a handler per partition")
            await mq.stop_message(ids[2])
            await wait_for(lambda: cancelled == [ids[2]], what="the stopped one cancelled")
            release.set()
            await wait_for(lambda: mq.stats().get("acked") == 3, what="the others acked")
    assert cancelled == [ids[2]]
