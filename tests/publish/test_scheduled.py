"""Scheduled delivery: ``publish(..., delay=/at=)`` holds a message and a running consumer
adds it to its stream when due: exactly once whoever moves it, debounced by name,
cancellable, listed, damaged payloads dead-lettered, on plain and partitioned topics."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import (
    ConfigError,
    MessageFormatError,
    Publisher,
    ScheduledId,
)
from streamq.publish import scheduling
from streamq.publish.payload_fields import EXCERPT_BYTES
from streamq.topic.partitions import partition_for_key
from streamq.wire.keys import Keys
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_a_delayed_message_is_added_when_due_not_before(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled = handled_messages(mq)
    asked = time.time()
    sid = await mq.publish("job", {"n": 1}, delay=0.6)
    assert isinstance(sid, ScheduledId) and isinstance(sid, str)
    assert await client.xlen(mq.stream) == 0  # waiting, not in the stream
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the delayed message")
        assert await mq.scheduled() == []
    (msg,) = handled
    assert msg.data == {"n": 1}
    assert msg.published_at.timestamp() >= asked + 0.6 - 0.01  # added when due
    assert set(msg.meta) == {"scheduled_at", "due_at"}
    due = datetime.fromisoformat(msg.meta["due_at"])
    assert abs(due.timestamp() - (asked + 0.6)) < 0.5


async def test_an_earlier_message_wakes_a_sleeping_mover(make_queue: QueueFactory) -> None:
    """A running mover with nothing to do sleeps up to MAX_SLEEP (5 s); a message
    scheduled meanwhile is delivered at its time, not at the end of that sleep."""
    mq = make_queue()
    handled = handled_messages(mq)
    async with mq.running():
        await anyio.sleep(0.3)  # the mover found nothing and sleeps
        due = time.time() + 0.3
        await mq.publish("job", 1, delay=0.3)
        await wait_for(lambda: len(handled) == 1, what="the message")
        late = time.time() - due
    assert late < 1.5, f"delivered {late:.2f}s after its due time"


async def test_at_takes_an_aware_datetime_and_refuses_a_naive_one(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()
    when = datetime.now(UTC) + timedelta(hours=1)
    sid = await mq.publish("job", 1, at=when)
    (row,) = await mq.scheduled()
    assert row.id == sid and abs((row.due - when).total_seconds()) < 0.01
    with pytest.raises(ConfigError, match="naive"):
        await mq.publish("job", 1, at=datetime.now() + timedelta(hours=1))
    with pytest.raises(ConfigError, match="delay"):
        await mq.publish("job", 1, delay=-1)
    with pytest.raises(ConfigError, match="delay"):
        await mq.publish("job", 1, delay="10")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="either"):
        await mq.publish("job", 1, delay=1, at=when)
    with pytest.raises(ConfigError, match="idempotency_key"):
        await mq.publish("job", 1, delay=1, idempotency_key="k")
    assert len(await mq.scheduled()) == 1  # nothing of the refused ones was stored


async def test_a_time_in_the_past_means_now(make_queue: QueueFactory) -> None:
    mq = make_queue()
    handled = handled_messages(mq)
    await mq.publish("job", 1, at=datetime(2001, 1, 1, tzinfo=UTC))
    (row,) = await mq.scheduled()
    assert abs(row.due.timestamp() - time.time()) < 5
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the message")


async def test_a_payload_that_is_not_json_is_refused_at_scheduling(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()
    with pytest.raises(MessageFormatError):
        await mq.publish("job", object(), delay=1)
    with pytest.raises(MessageFormatError):
        await mq.publish("not a type!", 1, delay=1)
    with pytest.raises(MessageFormatError):
        await mq.publish_many("job", [1, object()], delay=1)
    with pytest.raises(MessageFormatError, match="UTF-8"):
        await mq.publish("job", 1, delay=1, key=b"\xff")
    with pytest.raises(ConfigError, match="key"):
        await mq.publish("job", 1, delay=1, key=5)  # type: ignore[arg-type]
    assert await mq.scheduled() == []


async def test_scheduling_a_name_again_replaces_time_and_payload(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled = handled_messages(mq)
    first = await mq.publish("job", {"v": 1}, delay=3600, schedule_id="report-7")
    second = await mq.publish("job", {"v": 2}, delay=0.2, schedule_id="report-7")
    assert first == second == "report-7"
    (row,) = await mq.scheduled()
    assert row.due.timestamp() < time.time() + 60
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the debounced message")
        await anyio.sleep(0.3)
    assert [m.data for m in handled] == [{"v": 2}]
    assert await client.xlen(mq.stream) == 1


async def test_cancel_removes_a_waiting_message_once(make_queue: QueueFactory) -> None:
    mq = make_queue()
    sid = await mq.publish("job", 1, delay=0.3)
    keep = await mq.publish("job", 2, delay=0.3)
    assert await mq.cancel_scheduled(sid) is True
    assert await mq.cancel_scheduled(sid) is False
    assert await mq.cancel_scheduled("never-scheduled") is False
    handled = handled_messages(mq)
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the message not cancelled")
        await anyio.sleep(0.5)
        assert await mq.cancel_scheduled(keep) is False  # delivered: no longer waiting
    assert [m.data for m in handled] == [2]


async def test_scheduled_lists_and_topic_info_counts(make_queue: QueueFactory) -> None:
    mq = make_queue()
    info = await mq.topic_info()
    assert (info.scheduled, info.next_due) == (0, None)
    later = await mq.publish("report", 1, delay=7200, key="acct-1")
    sooner = await mq.publish("job", 2, delay=3600)
    rows = await mq.scheduled()
    assert [(r.id, r.type, r.key) for r in rows] == [
        (sooner, "job", None),
        (later, "report", "acct-1"),
    ]
    assert len(await mq.scheduled(limit=1)) == 1
    info = await mq.topic_info()
    assert info.scheduled == 2 and info.next_due == rows[0].due
    with pytest.raises(ConfigError):
        await mq.scheduled(limit=0)


async def test_a_time_beyond_the_limit_is_refused_naming_the_limit(
    make_queue: QueueFactory, redis_url: str
) -> None:
    mq = make_queue()
    far = [
        {"delay": 1e12},
        {"delay": timedelta(days=36_501)},
        {"at": datetime(9999, 12, 31, tzinfo=UTC)},
        {"at": datetime.now(UTC) + timedelta(days=36_501)},
    ]
    for when in far:
        with pytest.raises(ConfigError, match="at most 36,500 days"):
            await mq.publish("job", 1, **when)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="at most 36,500 days"):
            await mq.publish_many("job", [1, 2], **when)  # type: ignore[arg-type]
        with Publisher(redis_url, mq.stream) as publisher, pytest.raises(ConfigError):
            publisher.publish("job", 1, **when)  # type: ignore[arg-type]
    assert await mq.scheduled() == []
    sid = await mq.publish("job", 1, delay=timedelta(days=36_499))
    assert [row.id for row in await mq.scheduled()] == [sid]


TRICKY_KEYS = ['a","key","b', "\\", '"', "ключ 🔑", 'x\\"]', "key", ""]


@pytest.mark.parametrize("size", [10, 100_000], ids=["small", "big"])
async def test_listing_reads_type_and_key_from_payload_excerpts(
    make_queue: QueueFactory, size: int
) -> None:
    """Listing reads each payload's first and last bytes only; type and key come out
    whole whatever the key holds (quotes, backslashes, the text ``"key","``)."""
    mq = make_queue()
    for i, key in enumerate(TRICKY_KEYS):
        await mq.publish("job", {"pad": "p" * size, "k": key}, delay=3600 + i, key=key)
    await mq.publish("plain", "x" * size, delay=9000)
    rows = await mq.scheduled()
    assert [(r.type, r.key) for r in rows] == [("job", k) for k in TRICKY_KEYS] + [("plain", None)]


async def test_a_key_longer_than_the_excerpt_of_a_big_payload_is_listed_as_unknown(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()
    await mq.publish("job", "x" * 100_000, delay=3600, key="k" * (EXCERPT_BYTES + 1))
    await mq.publish("job", "x" * 10, delay=3601, key="k" * (EXCERPT_BYTES + 1))
    rows = await mq.scheduled()
    assert [(r.type, r.key) for r in rows] == [("job", None), ("job", "k" * (EXCERPT_BYTES + 1))]


async def test_years_ahead_waits_and_is_listed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled_messages(mq)
    sid = await mq.publish("job", 1, delay=timedelta(days=365 * 30))
    async with mq.running():
        moved = await scheduling.move_due(client, mq.stream, "test")
        await anyio.sleep(0.3)
        (row,) = await mq.scheduled()
    assert moved.moved == 0 and moved.next_due is not None
    assert row.id == sid and row.due.year >= datetime.now(UTC).year + 29
    assert await client.xlen(mq.stream) == 0


async def test_terminate_removes_scheduled_messages_and_cleanup_leaves_them(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    await mq.publish("job", 1)  # the stream exists
    await mq.publish("job", 2, delay=3600)
    assert await mq.cleanup() >= 0
    assert len(await mq.scheduled()) == 1
    await mq.terminate_topic()
    keys = Keys(mq.stream)
    assert await client.exists(keys.scheduled, keys.scheduled_payloads) == 0
    assert (await mq.topic_info()).scheduled == 0


async def test_a_partitioned_topic_schedules_in_the_keys_partition(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(partitions=4)
    handled = handled_messages(mq)
    sids = {key: await mq.publish("job", key, delay=0.3, key=key) for key in "abcdefgh"}
    for key, sid in sids.items():
        assert scheduled_id(sid).in_partition == partition_for_key(key, 4)
    plain = await mq.publish("job", "none", delay=0.3)
    info = await mq.topic_info()
    assert info.scheduled == 9
    async with mq.running():
        await wait_for(lambda: len(handled) == 9, what="every message")
        assert await mq.cancel_scheduled(plain) is False
    for msg in handled:
        if msg.data != "none":
            assert msg.partition == partition_for_key(msg.data, 4)
    assert {m.data for m in handled} == {*"abcdefgh", "none"}


async def test_a_name_scheduled_again_with_another_key_replaces_it_across_partitions(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(partitions=4)
    first_key = "a"
    other = next(k for k in "bcdefgh" if partition_for_key(k, 4) != partition_for_key("a", 4))
    await mq.publish("job", 1, delay=60, key=first_key, schedule_id="n")
    await mq.publish("job", 2, delay=60, key=other, schedule_id="n")
    (row,) = await mq.scheduled()
    assert row.key == other
    assert await mq.cancel_scheduled("n") is True  # a bare name: every partition searched
    assert await mq.scheduled() == []


async def test_the_blocking_publisher_schedules_as_the_queue_does(
    make_queue: QueueFactory, redis_url: str
) -> None:
    mq = make_queue(partitions=2)
    handled = handled_messages(mq)
    await mq.open()  # records the topic's two partitions
    with Publisher(redis_url, mq.stream) as publisher:
        sid = publisher.publish("job", "one", delay=0.2, key="k")
        assert isinstance(sid, ScheduledId) and sid.in_partition == partition_for_key("k", 2)
        named = publisher.publish("job", "old", delay=3600, schedule_id="n")
        assert publisher.publish("job", "two", delay=0.2, schedule_id="n") == named
        many = publisher.publish_many("job", ["three", "four"], at=datetime.now(UTC))
        assert all(isinstance(s, ScheduledId) for s in many)
        with pytest.raises(ConfigError, match="naive"):
            publisher.publish("job", 1, at=datetime(2030, 1, 1))
        with pytest.raises(ConfigError, match="replicas"):
            publisher.publish("job", 1, delay=1, replicas=1)
    async with mq.running():
        await wait_for(lambda: len(handled) == 4, what="the four messages")
        await anyio.sleep(0.3)
    assert sorted(m.data for m in handled) == ["four", "one", "three", "two"]


async def test_scheduling_loads_its_script_on_a_server_that_lost_it(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """A restarted or failed-over server has no scripts: EVALSHA's NOSCRIPT is answered
    by sending the script itself."""
    mq = make_queue()
    await mq.publish("job", 1, delay=60)
    await client.script_flush()
    sid = await mq.publish("job", 2, delay=60)
    assert [row.id for row in await mq.scheduled()][-1] == sid


def scheduled_id(sid: str) -> ScheduledId:
    """``sid`` as a scheduling publish returns it: a ScheduledId (typed as its base, str)."""
    assert isinstance(sid, ScheduledId), f"not a ScheduledId: {sid!r}"
    return sid


async def test_scheduling_does_the_same_through_the_queue_and_the_publisher(
    make_queue: QueueFactory, redis_url: str, stream: str
) -> None:
    """One scenario through MessageQueue and the blocking Publisher: a name scheduled
    again with another key waits once, in the new key's partition; keyless messages wait
    in their names' partitions."""
    first = "a"
    second = next(k for k in "bcdefgh" if partition_for_key(k, 2) != partition_for_key(first, 2))
    outcomes = {}
    for twin, topic in (("MessageQueue", stream), ("Publisher", f"{stream}-blocking")):
        mq = make_queue(stream=topic, partitions=2)
        await mq.open()
        try:
            if twin == "MessageQueue":
                sids = [
                    await mq.publish("job", 1, delay=3600, key=first, schedule_id="n"),
                    await mq.publish("job", 2, delay=3600, key=second, schedule_id="n"),
                    *await mq.publish_many("job", [3, 4, 5], delay=3600),
                ]
            else:

                def through_the_publisher(topic: str = topic) -> list[str]:
                    with Publisher(redis_url, topic) as publisher:
                        return [
                            publisher.publish("job", 1, delay=3600, key=first, schedule_id="n"),
                            publisher.publish("job", 2, delay=3600, key=second, schedule_id="n"),
                            *publisher.publish_many("job", [3, 4, 5], delay=3600),
                        ]

                sids = await anyio.to_thread.run_sync(through_the_publisher)
            waiting = await mq.scheduled()
        finally:
            if twin == "Publisher":
                await mq.terminate_topic()
        outcomes[twin] = (
            [scheduled_id(sid).in_partition for sid in sids[:2]],
            [scheduled_id(sid).in_partition == partition_for_key(sid, 2) for sid in sids[2:]],
            sorted(str(m.id) for m in waiting) == sorted(map(str, sids[1:])),
            [m.partition for m in waiting if m.id == "n"],
        )
    expected = (
        [partition_for_key(first, 2), partition_for_key(second, 2)],
        [True, True, True],
        True,
        [partition_for_key(second, 2)],
    )
    assert outcomes == {"MessageQueue": expected, "Publisher": expected}, outcomes
