"""Scheduled delivery: ``publish(..., delay=/at=)`` holds a message and a running consumer
adds it to its stream when due: exactly once whoever moves it, debounced by name,
cancellable, listed, damaged payloads dead-lettered, on plain and partitioned topics."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import (
    ConfigError,
    Message,
    MessageFormatError,
    MessageQueue,
    Publisher,
    ScheduledId,
)
from streamq.publish import scheduling
from streamq.topic.partitions import partition_for_key
from streamq.wire.keys import Keys
from tests.conftest import QueueFactory, handled_messages, wait_for

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


async def test_two_consumers_move_the_same_due_messages_once(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    a, b = make_queue(), make_queue()
    seen: list[int] = []
    for mq in (a, b):

        @mq.handler("job")
        async def keep(msg: Message[int]) -> None:
            seen.append(msg.data)

    total = 3000
    at = datetime.now(UTC) + timedelta(seconds=1)
    await a.publish_many("job", range(total), at=at)
    async with a.running(), b.running():
        await wait_for(lambda: len(seen) >= total, timeout=30, what="every message")
        await anyio.sleep(0.5)
    assert sorted(seen) == list(range(total))  # each handled once
    assert await client.xlen(a.stream) == total
    assert await client.zcard(Keys(a.stream).scheduled) == 0
    assert await client.hlen(Keys(a.stream).scheduled_payloads) == 0


async def test_a_damaged_payload_is_dead_lettered_and_the_others_delivered(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled = handled_messages(mq)
    keys = Keys(mq.stream)
    now_ms = int(time.time() * 1000)
    for name, payload in (("broken", "{not json"), ("object", '{"type":"job"}')):
        await client.zadd(keys.scheduled, {name: now_ms})
        await client.hset(keys.scheduled_payloads, name, payload)
    await client.zadd(keys.scheduled, {"no-payload": now_ms})
    await mq.publish("job", 1, delay=0)
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the good message")
        letters = await wait_letters(mq, 3)
        assert await mq.scheduled() == []
    by_id = {letter.original_id: letter for letter in letters}
    assert set(by_id) == {"broken", "object", "no-payload"}
    assert "not a JSON array" in by_id["broken"].error and by_id["broken"].data == "{not json"
    assert "missing" in by_id["no-payload"].error
    assert by_id["broken"].error_type == scheduling.DAMAGED_ERROR_TYPE


async def wait_letters(mq: MessageQueue, count: int) -> list[Any]:
    letters: list[Any] = []

    async def enough() -> bool:
        letters[:] = await mq.dead_letters()
        return len(letters) >= count

    await wait_for(enough, what=f"{count} dead letters")
    return letters


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
        assert sid.in_partition == partition_for_key(key, 4)
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


@pytest.mark.slow
async def test_a_consumer_killed_while_moving_loses_and_doubles_nothing(
    make_queue: QueueFactory, client: aioredis.Redis, redis_url: str
) -> None:
    mq = make_queue()
    total = 30_000
    await mq.publish_many("job", range(total), at=datetime.now(UTC) + timedelta(seconds=1))
    keys = Keys(mq.stream)
    command = [sys.executable, "-m", "tests.mover_process", redis_url, mq.stream, "doomed"]
    async with await anyio.open_process(command, stdout=None, stderr=None) as process:

        async def moving() -> bool:
            return await client.xlen(mq.stream) > 0

        try:
            await wait_for(moving, timeout=30, what="the first moved messages")
        finally:
            process.kill()  # SIGKILL: no shutdown, mid-move
            await process.wait()
    left = await client.zcard(keys.scheduled)
    assert 0 < left < total, "the kill did not land while messages were being moved"
    handled = handled_messages(mq)
    async with mq.running():
        await wait_for(lambda: len(handled) >= left, timeout=30, what="the rest moved")

        async def all_moved() -> bool:
            return await client.xlen(mq.stream) >= total

        await wait_for(all_moved, timeout=30, what="every message in the stream")
    data = [json.loads(fields[b"data"]) for _, fields in await client.xrange(mq.stream)]
    assert sorted(data) == list(range(total))  # each once: none lost, none doubled
    assert await client.zcard(keys.scheduled) == await client.hlen(keys.scheduled_payloads) == 0


async def test_stats_and_metrics_count_scheduled_messages_and_lateness(
    make_queue: QueueFactory,
) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from streamq.metrics import QueueCollector

    mq = make_queue()
    handled = handled_messages(mq)
    await mq.publish_many("job", [1, 2, 3], delay=0.2)
    await mq.publish("job", 4, delay=3600)
    async with mq.running():
        await wait_for(lambda: len(handled) == 3, what="the three due messages")
        stats = mq.stats()
        import prometheus_client

        registry = prometheus_client.CollectorRegistry()
        collector = QueueCollector(mq)
        registry.register(collector)
        body = await anyio.to_thread.run_sync(prometheus_client.generate_latest, registry)
        collector.close()
    assert stats["scheduled_moved"] == 3
    lateness = stats["scheduled_lateness_seconds"]
    assert lateness["count"] == 3 and 0 <= lateness["sum"] < 3
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    assert samples["streamq_scheduled_messages"] == 1
    assert samples["streamq_scheduled_moved_total"] == 3
    assert samples["streamq_scheduled_lateness_seconds_count"] == 3


async def test_the_documented_acl_lines_cover_scheduling_without_one_refusal(
    redis_url: str, client: aioredis.Redis, stream: str
) -> None:
    """A service with the generated lines moves scheduled messages and publishes a
    periodic one; an operator schedules, lists and cancels: the server refuses nothing."""
    import uuid
    from urllib.parse import quote, urlsplit, urlunsplit

    from streamq import StartFrom
    from streamq.testing import TEST_TIMINGS
    from streamq.wire.permissions import acl_rules

    password = uuid.uuid4().hex
    users = {role: f"streamq-test-{uuid.uuid4().hex[:8]}" for role in ("service", "operator")}
    for role, user in users.items():
        rules = acl_rules(stream, operator=role == "operator", password=password)
        await client.execute_command("ACL", "SETUSER", user, *rules)
    await client.execute_command("ACL", "LOG", "RESET")

    def url_of(user: str) -> str:
        parts = urlsplit(redis_url)
        netloc = f"{quote(user)}:{password}@{parts.hostname}:{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    svc = MessageQueue(url_of(users["service"]), stream=stream, group="g", consumer="svc",
                       start=StartFrom.EARLIEST, config=TEST_TIMINGS)  # fmt: skip
    ops = MessageQueue(url_of(users["operator"]), stream=stream, group="g", consumer="ops")
    handled = handled_messages(svc)
    svc.periodic("job", every=0.2, name="tick")(lambda: "tick")
    try:
        async with ops:
            doomed = await ops.publish("job", "cancelled", delay=1)
            await ops.publish("job", "due", delay=0.2)
            assert len(await ops.scheduled()) == 2 and (await ops.topic_info()).scheduled == 2
            assert await ops.cancel_scheduled(doomed)
            async with svc.running():
                await wait_for(lambda: "due" in [m.data for m in handled], what="the message")
                await wait_for(lambda: "tick" in [m.data for m in handled], what="a tick")
            await ops.terminate_topic()
        log = await client.acl_log()
        refused = [e for e in log if str(e.get("username")) in users.values()]
        assert [e for e in refused if e.get("object") != "client|setinfo"] == []
    finally:
        await client.execute_command("ACL", "DELUSER", *users.values())


async def test_an_idle_mover_does_not_poll(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """With the next message an hour away, a running consumer's mover sleeps (at most
    MAX_SLEEP, 5 s, at a time): a few script calls in 2 s, not one per read loop turn."""
    mq = make_queue()
    handled_messages(mq)
    await mq.publish("job", 1, delay=3600)

    async def move_calls() -> int:
        stats = await client.info("commandstats")
        return sum(
            int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
        )

    async with mq.running():
        await anyio.sleep(0.5)  # started: its first move is done
        before = await move_calls()
        await anyio.sleep(2)
        calls = await move_calls() - before
    assert calls <= 2, f"{calls} script calls in 2 s while nothing was due"
