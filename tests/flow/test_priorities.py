"""Priorities: ``MessageQueue(..., priorities=N)`` stores each level in its own stream per
partition, publishes go to the level asked (the middle one by default), consumers start
higher levels first, and the lower ones still get their weighted share; every per-stream
feature (pending first, claiming, dead letters, stop/resume, topic_info, terminate) covers
every level, on one node and on the embedded cluster."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import ConfigError, Message, MessageQueue, Publisher
from streamq.testing import delete_stream_keys
from streamq.wire.client import connect_sync
from streamq.wire.keys import Keys
from streamq.wire.partition_names import level_weights, topic_streams
from streamq.wire.slots import slot_of
from tests.helpers.queues import ok_and_poison
from tests.helpers.queues import queue as shared_queue
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def topic(where: str) -> Iterator[str]:
    """A fresh topic on ``where``; every stream of the shapes used here is deleted after."""
    name = f"test-{os.urandom(5).hex()}"
    yield name
    for partitions, priorities in ((1, 1), (1, 2), (1, 3), (2, 3)):
        for stream in topic_streams(name, partitions, priorities):
            delete_stream_keys(where, stream)


def queue(url: str, topic: str, priorities: int = 3, **options: object) -> MessageQueue:
    return shared_queue(url, topic, priorities=priorities, **options)


def lengths(url: str, streams: tuple[str, ...]) -> list[int]:
    deployment = connect_sync(url)
    try:
        return [int(deployment.client_for(s).xlen(s)) for s in streams]
    finally:
        deployment.close()


class Email(BaseModel):
    to: str


def test_level_streams_are_named_apart_from_partitions() -> None:
    assert topic_streams("t", 1, 3) == ("t:q0", "t", "t:q2")
    partitions = topic_streams("t", 2, 1)
    assert topic_streams("t", 2, 3) == (
        f"{partitions[0]}:q0", f"{partitions[1]}:q0", *partitions,
        f"{partitions[0]}:q2", f"{partitions[1]}:q2",
    )  # fmt: skip
    assert topic_streams("t", 1, 2) == ("t:q0", "t")  # the default level of 2 is 1
    assert level_weights(3) == (4, 2, 1)


async def test_publishes_land_in_their_level(where: str, topic: str) -> None:
    mq = queue(where, topic)
    assert mq.priorities == 3 and mq.streams == (f"{topic}:q0", topic, f"{topic}:q2")
    async with mq:
        high = await mq.publish("ok", 1, priority=0)
        middle = await mq.publish("ok", 2)  # the default: the middle level
        low = await mq.publish("ok", 3, priority=2)
        many = await mq.publish_many("ok", [4, 5], priority=2)
        typed = await mq.publisher("email", Email).publish(Email(to="a@b.c"), priority=0)
        later = await mq.publish("ok", 6, priority=0, delay=0.2)
        assert [i.split(":")[0] for i in (high, middle, low, *many, typed)] == list("012220")
        assert later.in_partition == 0  # type: ignore[attr-defined]
        with Publisher(where, stream=topic) as blocking:  # follows the topic's record
            assert blocking.publish("ok", 7, priority=2).startswith("2:")
            assert blocking.publish_many("ok", [8], priority=0)[0].startswith("0:")
            assert blocking.publish("ok", 9).startswith("1:")
        assert lengths(where, mq.streams) == [3, 2, 4]
        handled = ok_and_poison(mq)

        @mq.handler("email")
        async def email(msg: Message[Email]) -> None:
            pass

        async with mq.running():  # the scheduled message is moved into its own level
            await wait_for(lambda: len(handled) == 9, what="the ok messages")
        assert lengths(where, mq.streams) == [4, 2, 4]


async def test_bad_settings_and_priorities_are_config_errors(where: str, topic: str) -> None:
    for bad in (0, 11, "3", True, 2.0):
        with pytest.raises(ConfigError, match="priorities must be"):
            queue(where, topic, priorities=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ordered=True"):
        queue(where, topic, ordered=True)
    async with queue(where, topic) as mq:
        for bad in (3, -1, "0", True, 1.0):
            with pytest.raises(ConfigError, match="priority must be"):
                await mq.publish("ok", 1, priority=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="priority must be"):
            await mq.publish_many("ok", [1], priority=5)
        with pytest.raises(ConfigError, match="priority must be"):
            await mq.publish("ok", 1, priority=7, delay=1)
        with Publisher(where, stream=topic) as blocking, pytest.raises(ConfigError):
            blocking.publish("ok", 1, priority=3)
    with pytest.raises(ConfigError, match="has 3 priority levels"):
        await queue(where, topic, priorities=2).open()
    with pytest.raises(ConfigError, match="has 3 priority levels"):
        await MessageQueue(where, stream=topic).open()
    plain = f"{topic}-plain"
    try:
        async with MessageQueue(where, stream=plain) as mq:
            with pytest.raises(ConfigError, match="no priorities"):
                await mq.publish("ok", 1, priority=0)
            await mq.publish("ok", 1)
        with pytest.raises(ConfigError, match="cannot gain priority levels"):
            await queue(where, plain).open()
    finally:
        delete_stream_keys(where, plain)


async def test_a_damaged_record_of_levels_is_named_as_damaged(where: str, topic: str) -> None:
    from streamq.topic.partitions import check_partition_count_sync

    key = Keys(topic).partitions
    deployment = connect_sync(where)
    try:
        client = deployment.client_for(topic)
        client.hset(key, "priorities", "three")
        message = rf"damaged .*{re.escape(key)}.*'priorities'.*found 'three'"
        with pytest.raises(ConfigError, match=message):
            await queue(where, topic).open()
        with pytest.raises(ConfigError, match=message):
            check_partition_count_sync(client, topic, 1, 3)
        client.hset(key, "priorities", "3")  # repaired: the topic opens
        async with queue(where, topic) as mq:
            assert (await mq.publish("ok", 1, priority=0)).startswith("0:")
    finally:
        deployment.close()


async def test_high_entries_overtake_a_backlog_of_low_ones(where: str, topic: str) -> None:
    mq = queue(where, topic, priorities=2, concurrency=2, max_in_flight=16)
    low_done: list[int] = []
    latencies: list[float] = []

    @mq.handler("low")
    async def low(msg: Message[int]) -> None:
        await anyio.sleep(0.01)
        low_done.append(msg.data)

    @mq.handler("high")
    async def high(msg: Message[float]) -> None:
        latencies.append(time.time() - msg.data)

    async with mq:
        await mq.publish_many("low", range(400), priority=1)
        async with mq.running():
            await wait_for(lambda: len(low_done) >= 20, what="the low backlog under way")
            for _ in range(10):
                await mq.publish("high", time.time(), priority=0)
                await anyio.sleep(0.02)
            await wait_for(lambda: len(latencies) == 10, what="the high entries")
            assert len(low_done) < 300, "the high entries waited for the low backlog"
    assert max(latencies) < 0.5, latencies


async def test_a_backlog_of_high_entries_leaves_the_low_ones_their_share(
    where: str, topic: str
) -> None:
    mq = queue(where, topic, priorities=2, concurrency=1, max_in_flight=32)
    order: list[str] = []

    @mq.handler("job")
    async def job(msg: Message[str]) -> None:
        order.append(msg.data)
        await anyio.sleep(0.002)  # the readers keep both levels' entries waiting

    async with mq:
        await mq.publish_many("job", ["high"] * 300, priority=0)
        await mq.publish_many("job", ["low"] * 100, priority=1)
        await run_until(mq, lambda: len(order) == 400)
    # weights 2 and 1: a low entry in every 3 started while both wait (from when the low
    # level's reader has started: the levels' readers start one after the other)
    start = order.index("low")
    low = order[start : start + 150].count("low")
    assert 35 <= low <= 65, f"{low} low of 150 from the first: {order}"


async def test_every_stream_feature_covers_every_level(where: str, topic: str) -> None:
    mq = queue(where, topic)
    handled = ok_and_poison(mq)
    async with mq:
        ids = [await mq.publish("ok", n, priority=n % 3) for n in range(6)]
        bad = await mq.publish("poison", 0, priority=0)
        await mq.stop_message(ids[2])
        assert await mq.stopped_messages() == [ids[2]]
        async with mq.running():
            await wait_for(lambda: len(handled) == 5, what="all but the stopped one")
            await wait_for(lambda: mq.stats().get("dead_lettered") == 1, what="a dead letter")
            await mq.resume_message(ids[2])
            await wait_for(lambda: ids[2] in handled, what="the resumed entry")
            (letter,) = await mq.dead_letters()
            assert letter.original_id == bad and bad.startswith("0:")
            info = await mq.topic_info()
            assert (info.length, info.pending, len(info.partitions)) == (7, 0, 3)
            assert [row.stream for row in info.partitions] == list(mq.streams)
            assert [row.length for row in info.partitions] == [3, 2, 2]
        assert await mq.purge_dead_letters() == 1
        await mq.terminate_topic()
        assert not (await mq.topic_info()).exists
    for stream in mq.streams:
        with connect_sync(where).client_for(stream, owner=True) as raw:
            left = raw.keys(stream) + raw.keys(f"{Keys(stream).prefix}*")
            assert left in ([], [f"{Keys(stream).prefix}terminated".encode()]), left
    async with queue(where, topic, priorities=2) as again:  # the topic can be re-created
        assert (await again.publish("ok", 1, priority=0)).startswith("0:")


async def test_pending_entries_of_every_level_first_then_claimed_ones(
    where: str, topic: str
) -> None:
    mq = queue(where, topic, consumer="worker", claim_idle=0.3, claim_interval=0.1)
    seen: list[tuple[str, int]] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        seen.append((msg.id, msg.delivery_count))

    async with mq:
        ids = [await mq.publish("job", n, priority=n % 3) for n in range(6)]
        deployment = connect_sync(where)
        for index, stream in enumerate(mq.streams):  # one entry each: the consumer's own,
            client = deployment.client_for(stream)  # the other a dead consumer's
            client.xreadgroup("g", "worker", {stream: ">"}, count=1)
            client.xreadgroup("g", "dead", {stream: ">"}, count=1)
            assert client.xpending(stream, "g")["pending"] == 2, index
        deployment.close()
        await run_until(mq, lambda: len(seen) == 6, timeout=10)
    assert sorted(i for i, _ in seen) == sorted(ids)
    assert {count for _, count in seen} == {2}
    assert mq.stats()["claimed"] == 3


async def test_a_partitioned_topic_with_priorities(where: str, topic: str) -> None:
    mq = queue(where, topic, partitions=2)
    got: list[Message[int]] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        got.append(msg)

    async with mq:
        assert len(mq.streams) == 6 and mq.partitions == 2
        by_level = {level: await mq.publish("job", level, key="k", priority=level)
                    for level in range(3)}  # fmt: skip
        spread = await mq.publish_many("job", [9] * 4, priority=2)
        await run_until(mq, lambda: len(got) == 7)
    partition = int(by_level[0].split(":")[0])  # the key's partition, in level 0
    assert [int(i.split(":")[0]) for i in by_level.values()] == [
        partition + 2 * n for n in range(3)
    ]
    assert {int(i.split(":")[0]) for i in spread} == {4, 5}
    assert {m.partition for m in got if m.data != 9} == {partition}
    assert {m.partition for m in got} == {0, 1}


async def test_a_message_says_its_level(where: str, topic: str) -> None:
    """``msg.priority`` is the level the entry was published at, in every mode that reads a
    topic with priorities, with its partition beside it; None without priorities."""
    shapes = ((topic, 1, "g"), (f"{topic}-split", 2, "g"), (f"{topic}-fanout", 2, None))
    try:
        for name, partitions, group in shapes:
            assert await levels_seen(where, name, partitions, group) == [0, 1, 2, 1]
        assert await levels_seen(where, f"{topic}-plain", 1, "g", priorities=1) == [None] * 4
    finally:
        for name in (f"{topic}-split", f"{topic}-fanout", f"{topic}-plain"):
            for stream in topic_streams(name, 2, 3):
                delete_stream_keys(where, stream)
            delete_stream_keys(where, name)


async def levels_seen(
    url: str, name: str, partitions: int, group: str | None, priorities: int = 3
) -> list[int | None]:
    """What ``msg.priority`` says of entries published at levels 0, 1, 2 (by key: in one
    partition, which ``msg.partition`` says too) and the default level."""
    mq = queue(url, name, partitions=partitions, group=group, priorities=priorities)
    got: dict[int, Message[int]] = {}

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        got[msg.data] = msg

    async def publish() -> None:
        for level in range(priorities):
            await mq.publish("job", level, key="k", priority=level if priorities > 1 else None)
        for n in range(priorities, 4):
            await mq.publish("job", n, key="k")  # the default level

    async with mq:
        if group is None:  # a fan-out subscriber reads what is published once it runs
            async with mq.running():
                await anyio.sleep(0.2)
                await publish()
                await wait_for(lambda: len(got) == 4, what="the entries of every level")
        else:
            await publish()
            await run_until(mq, lambda: len(got) == 4)
    assert len({got[n].partition for n in range(4)}) == 1  # the key's partition
    return [got[n].priority for n in range(4)]


class Level(BaseModel):
    level: int | None


async def test_requests_go_to_the_level_asked(where: str, topic: str) -> None:
    mq = queue(where, topic)

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> Level:
        return Level(level=msg.priority)

    async with mq, mq.running():
        assert await mq.request("quote", 1, priority=0, timeout=10, reply_model=Level) == Level(
            level=0
        )
        assert (await mq.request("quote", 1, timeout=10, reply_model=Level)).level == 1
        low = await mq.request("quote", 1, key="k", priority=2, timeout=10, reply_model=Level)
        assert low.level == 2
        for bad in (3, -1, "0", True):
            with pytest.raises(ConfigError, match="priority must be"):
                await mq.request("quote", 1, priority=bad, timeout=1)  # type: ignore[arg-type]
    plain = f"{topic}-plain"
    try:
        async with MessageQueue(where, stream=plain) as other:
            with pytest.raises(ConfigError, match="no priorities"):
                await other.request("quote", 1, priority=0, timeout=1)
    finally:
        delete_stream_keys(where, plain)


async def test_periodic_publishers_publish_at_the_level_asked(where: str, topic: str) -> None:
    mq = queue(where, topic)
    levels: dict[str, set[int | None]] = {"high": set(), "middle": set()}

    @mq.periodic("tick", every=0.1, name="high", priority=0)
    @mq.periodic("tick", every=0.1, name="middle")
    def tick() -> str:
        return "tick"

    @mq.handler("tick")
    async def handled(msg: Message[str]) -> None:
        levels["high" if msg.id.startswith("0:") else "middle"].add(msg.priority)

    async with mq:
        await run_until(mq, lambda: all(levels.values()))
    assert levels == {"high": {0}, "middle": {1}}
    for bad in (-1, 10, "0", True, 1.0):
        with pytest.raises(ConfigError, match="priority must be"):
            mq.periodic("tick", every=1, name="bad", priority=bad)(tick)  # type: ignore[arg-type]
    over = queue(where, topic)  # a level the topic does not have: refused when it runs
    over.handler("tick")(handled)
    over.periodic("tick", every=60, priority=3)(tick)
    with anyio.fail_after(10), pytest.raises(ConfigError, match="priority must be between 0"):
        await over.run()
    plain = queue(where, f"{topic}-plain", priorities=1)
    plain.periodic("tick", every=60, priority=0)(tick)
    try:
        with pytest.raises(ConfigError, match="no priorities"):
            await plain.run_periodics()
    finally:
        delete_stream_keys(where, f"{topic}-plain")


async def test_topic_info_rows_say_their_partition_and_level(where: str, topic: str) -> None:
    from streamq.cli.render import render_info

    async with queue(where, topic, partitions=2) as mq:
        await mq.publish("job", 1, priority=0)
        info = await mq.topic_info()
        assert [(r.index, r.partition, r.priority) for r in info.partitions] == [
            (i, i % 2, i // 2) for i in range(6)
        ]
        lines = render_info(info).splitlines()
        header = next(line for line in lines if line.startswith("partition "))
        assert header.split()[:3] == ["partition", "level", "stream"], header
        rows = [line.split() for line in lines[lines.index(header) + 1 :]]
        assert [(row[0], row[1], row[2]) for row in rows] == [
            (str(i % 2), str(i // 2), stream) for i, stream in enumerate(mq.streams)
        ]
    split = f"{topic}-split"  # without priorities: the rows as they were, no level
    try:
        async with MessageQueue(where, stream=split, partitions=2) as plain:
            info = await plain.topic_info()
            assert [(r.index, r.partition, r.priority) for r in info.partitions] == [
                (0, 0, None), (1, 1, None)
            ]  # fmt: skip
            assert "level" not in render_info(info)
    finally:
        for stream in (*topic_streams(split, 2, 1), split):
            delete_stream_keys(where, stream)


async def test_level_streams_keep_their_keys_in_their_own_slot(where: str, topic: str) -> None:
    async with queue(where, topic, partitions=2) as mq:
        for level in range(3):
            await mq.publish("job", level, priority=level)
        info = await mq.topic_info()
        for row, stream in zip(info.partitions, mq.streams, strict=True):
            assert row.stream == stream and row.node == mq._topic.node_of(stream)
            assert slot_of(Keys(stream).dead_letters) == slot_of(stream)


async def test_the_clients_of_a_level_stream_reach_it(where: str, topic: str) -> None:
    async with queue(where, topic) as mq:
        entry = await mq.publish("job", 1, priority=2)
        client: aioredis.Redis = mq.client_for(mq.streams[2])
        assert await client.xlen(mq.streams[2]) == 1 and entry.startswith("2:")


async def test_the_dashboards_view_of_a_topic_covers_every_level(where: str, topic: str) -> None:
    from streamq.dashboard.view import open_view  # the dashboard's own modules, not the app
    from streamq.wire.client import connect

    async with queue(where, topic) as mq:
        high = await mq.publish("job", 1, priority=0)
    deployment = connect(where)
    try:
        view = await open_view(deployment, topic)
        assert view.topic.streams == mq.streams and view.partitioned
        info = await view.admin.topic_info()
        assert [row.length for row in info.partitions] == [1, 0, 0]
        await view.admin.stop_message(high)
        assert await view.admin.stopped_messages() == [high]
    finally:
        await deployment.aclose()


async def test_max_per_key_caps_a_key_over_every_level(where: str, topic: str) -> None:
    """With priorities, ``max_per_key`` holds over all the levels together: a key's
    entries of the high and the low level never run more than the cap at once, and the
    other keys' entries run while that key waits."""
    mq = queue(where, topic, concurrency=4, max_per_key=1, max_in_flight=64, read_count=64)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    order: list[str] = []
    release = anyio.Event()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        key = msg.key or ""
        running[key] = running.get(key, 0) + 1
        most[key] = max(most.get(key, 0), running[key])
        order.append(key)
        if key == "big":
            await release.wait()
        running[key] -= 1

    async with mq:
        for level in (0, 2):  # one tenant's burst on the high and the low level
            await mq.publish_many("job", list(range(10)), key="big", priority=level)
        await mq.publish_many("job", list(range(6)), key=lambda n: f"small-{n % 3}", priority=2)
        async with mq.running():
            await wait_for(
                lambda: len(order) == 7, what="the small keys' entries run while 'big' waits"
            )
            assert order.count("big") == 1, f"'big' ran {order.count('big')} at once: {order}"
            release.set()
            await wait_for(lambda: len(order) == 26, what="all 26 handled")
    assert most["big"] == 1, f"{most['big']} entries of one key ran at once with max_per_key=1"
