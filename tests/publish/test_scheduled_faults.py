"""Scheduled delivery under concurrency and faults: two consumers moving the same due
messages, a consumer killed while moving, damaged payloads, permissions, metrics, and a
mover that sleeps rather than polls."""

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
    Message,
    MessageQueue,
)
from streamq.consume import mover
from streamq.publish import scheduling
from streamq.wire.keys import Keys
from tests.helpers.clients import sync_client
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.scheduled import NOT_UTF8_ID, SHOWN_ID, schedule_under_an_id_not_utf8
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


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


async def test_a_damaged_payload_under_an_id_that_is_not_utf8_is_counted(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The mover counts what a move did whatever the IDs it dead-lettered are made of."""
    mq = make_queue()
    handled = handled_messages(mq)
    keys = Keys(mq.stream)
    now_ms = int(time.time() * 1000)
    await client.zadd(keys.scheduled, {b"\xff\xfe-id": now_ms})
    await client.hset(keys.scheduled_payloads, b"\xff\xfe-id", "{not json")
    await mq.publish("job", 1, delay=0)
    async with mq.running():
        await wait_for(lambda: len(handled) == 1, what="the good message")
        await wait_letters(mq, 1)
        await wait_for(lambda: mq.stats()["dead_lettered"] == 1, what="the damaged one counted")
        stats = mq.stats()
    assert stats["scheduled_moved"] == 1 and stats["scheduled_lateness_seconds"]["count"] == 1
    assert "could not move" not in caplog.text
    shown = "\\xff\\xfe-id"  # the ID's bytes escaped, then quoted as a damaged record's field
    assert f"damaged scheduled record in {keys.scheduled!r}, field {shown!r}" in caplog.text


async def test_a_scheduled_id_that_is_not_utf8_is_listed_escaped_and_moved(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis
) -> None:
    """An ID written by hand that is not UTF-8 is listed with its bytes escaped (not a
    crash of ``scheduled()``), and moved once due like any other."""
    mq = make_queue()
    handled = handled_messages(mq, "report")
    with sync_client(redis_url, mq.stream) as r:
        schedule_under_an_id_not_utf8(redis_url, r, mq.stream)
    async with mq:
        (listed,) = await mq.scheduled()
        assert (listed.id, listed.type) == (SHOWN_ID, "report")
        await client.zadd(Keys(mq.stream).scheduled, {NOT_UTF8_ID: int(time.time() * 1000)})
        async with mq.running():
            await wait_for(lambda: len(handled) == 1, what="the message moved once due")
        assert handled[0].data == {"n": 1} and await mq.scheduled() == []


async def wait_letters(mq: MessageQueue, count: int) -> list[Any]:
    letters: list[Any] = []

    async def enough() -> bool:
        letters[:] = await mq.dead_letters()
        return len(letters) >= count

    await wait_for(enough, what=f"{count} dead letters")
    return letters


@pytest.mark.slow
async def test_a_consumer_killed_while_moving_loses_and_doubles_nothing(
    make_queue: QueueFactory, client: aioredis.Redis, redis_url: str
) -> None:
    mq = make_queue()
    total = 30_000
    await mq.publish_many("job", range(total), at=datetime.now(UTC) + timedelta(seconds=1))
    keys = Keys(mq.stream)
    command = [sys.executable, "-m", "tests.helpers.mover_process", redis_url, mq.stream, "doomed"]
    async with await anyio.open_process(command, stdout=None, stderr=None) as process:

        async def moving() -> bool:
            length: int = await client.xlen(mq.stream)
            return length > 0

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
            length: int = await client.xlen(mq.stream)
            return length >= total

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
    redis_url: str, client: aioredis.Redis, stream: str, on_cluster: bool
) -> None:
    """A service with the generated lines moves scheduled messages and publishes a
    periodic one; an operator schedules, lists and cancels: the server refuses nothing."""
    if on_cluster:
        pytest.skip("ACL users are set per node: this test sets them on one node only")
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
    make_queue: QueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the next message an hour away, a running consumer's mover sleeps (at most
    MAX_SLEEP, 5 s, at a time): a few move scripts in 2 s, not one per read loop turn.
    (The moves are counted where the mover makes them: the consumer's other scripts,
    such as the pause record's read every half second, are not the mover's.)"""
    mq = make_queue()
    handled_messages(mq)
    await mq.publish("job", 1, delay=3600)
    moves: list[float] = []
    real_move_due = scheduling.move_due

    async def counted_move_due(*args: Any, **kwargs: Any) -> Any:
        moves.append(anyio.current_time())
        return await real_move_due(*args, **kwargs)

    monkeypatch.setattr(mover, "move_due", counted_move_due)
    async with mq.running():
        await anyio.sleep(0.5)  # started: its first move is done
        before = len(moves)
        await anyio.sleep(2)
        calls = len(moves) - before
    assert before >= 1, "the mover never moved: the count measures nothing"
    assert calls <= 2, f"{calls} move scripts in 2 s while nothing was due"


async def test_a_broken_schedule_does_not_stop_the_consumer(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The schedule's key overwritten with a string (WRONGTYPE for every move): the mover
    logs and backs off; the consumer goes on handling what is published."""
    mq = make_queue()
    handled = handled_messages(mq)
    await client.set(Keys(mq.stream).scheduled, "not a sorted set")
    async with mq.running():
        await mq.publish("job", 1)
        await wait_for(lambda: len(handled) == 1, what="the plain message")
        await wait_for(lambda: "could not move due scheduled" in caplog.text, what="a warning")
        assert "error" not in await mq.health()
