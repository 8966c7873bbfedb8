"""Periodic publishing: ``@mq.periodic(type, every=/cron=)`` publishes once per tick across
every running process of a queue (the tick claimed in Redis), without making up missed
ticks unless asked; bad settings are refused at registration."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import App, ConfigError, HandlerError, MessageQueue, Router
from streamq.publish.periodic import Periodic, record_key
from streamq.topic.partitions import partition_for_key, partition_streams
from tests.helpers.clients import sync_client
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def ticks_in(client: aioredis.Redis, stream: str) -> list[str]:
    """The ``periodic_tick`` of every entry of ``stream``, in stream order."""
    return [
        json.loads(fields[b"meta"])["periodic_tick"] for _, fields in await client.xrange(stream)
    ]


async def test_bad_settings_are_refused_at_registration(make_queue: QueueFactory) -> None:
    mq = make_queue()
    for options, match in (
        ({"cron": "every monday"}, "not valid"),
        ({"cron": "61 * * * *"}, "not valid"),
        ({}, "either"),
        ({"every": 5, "cron": "* * * * *"}, "either"),
        ({"every": 0}, "> 0"),
        ({"every": "5"}, "> 0"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus_Mons"}, "not a time zone"),
        ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "not a time zone"),
        ({"cron": "0 9 * * *", "timezone": 2}, "IANA"),
        ({"every": 60, "timezone": "Europe/Paris"}, "applies to cron"),
    ):
        with pytest.raises(ConfigError, match=match):
            mq.periodic("report", **options)(lambda: 1)
    with pytest.raises(ConfigError):
        mq.periodic("bad type!", every=1)(lambda: 1)
    mq.periodic("report", every=60)(lambda: 1)
    with pytest.raises(ConfigError, match="name="):
        mq.periodic("report", cron="*/5 * * * *")(lambda: 2)
    mq.periodic("report", cron="*/5 * * * *", name="report-5min")(lambda: 2)
    mq.periodic("report", cron="0 9 * * *", timezone="Europe/Paris", name="paris")(lambda: 3)
    mq.periodic("report", cron="0 9 * * *", timezone=ZoneInfo("Asia/Tokyo"), name="tokyo")(
        lambda: 4
    )
    assert [p.name for p in mq.periodics] == ["report", "report-5min", "paris", "tokyo"]
    assert [p.timezone for p in mq.periodics] == [None, None, "Europe/Paris", "Asia/Tokyo"]


def test_ticks_are_the_same_instants_in_every_process() -> None:
    every = Periodic("r", "r", lambda: 1, every=60)
    assert every.next_tick(1_700_000_000.5) == 1_700_000_040.0
    assert every.next_tick(1_700_000_040.0) == 1_700_000_100.0
    cron = Periodic("r", "r", lambda: 1, cron="*/5 * * * *")
    start = datetime(2026, 1, 1, 10, 2, 30, tzinfo=UTC).timestamp()
    assert cron.next_tick(start) == datetime(2026, 1, 1, 10, 5, tzinfo=UTC).timestamp()
    on_tick = datetime(2026, 1, 1, 10, 5, tzinfo=UTC).timestamp()
    assert cron.next_tick(on_tick) == datetime(2026, 1, 1, 10, 10, tzinfo=UTC).timestamp()


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def test_cron_ticks_are_read_in_their_time_zone_across_daylight_saving() -> None:
    """09:00 in Paris is 08:00 UTC in winter, 07:00 UTC once summer time began (29 March
    2026); a time the clock skips runs at the first minute after the change, a time it
    repeats runs once; a tick inside the repeated hour is not taken for an earlier one."""
    nine = Periodic("r", "r", lambda: 1, cron="0 9 * * *", timezone="Europe/Paris")
    assert nine.next_tick(utc(2026, 3, 27, 12)) == utc(2026, 3, 28, 8)
    assert nine.next_tick(utc(2026, 3, 28, 8)) == utc(2026, 3, 29, 7)
    half_past_two = Periodic("r", "r", lambda: 1, cron="30 2 * * *", timezone="Europe/Paris")
    assert half_past_two.next_tick(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)  # 03:00 CEST
    assert half_past_two.next_tick(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 0, 30)
    # 02:10 the second time (01:10 UTC): the next is the following day's, not the first 02:30
    assert half_past_two.next_tick(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)
    hourly = Periodic("r", "r", lambda: 1, cron="0 * * * *", timezone="Europe/Paris")
    assert hourly.next_tick(utc(2026, 10, 25, 0, 10)) == utc(2026, 10, 25, 1)  # every hour
    assert hourly.next_tick(utc(2026, 10, 25, 1)) == utc(2026, 10, 25, 2)
    in_utc = Periodic("r", "r", lambda: 1, cron="0 9 * * *")  # the default
    assert in_utc.next_tick(utc(2026, 7, 1)) == utc(2026, 7, 1, 9)


async def test_three_consumers_publish_one_message_per_tick(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    queues = [make_queue() for _ in range(3)]
    calls: Counter[str] = Counter()
    for mq in queues:
        handled_messages(mq, "tick")

        @mq.periodic("tick", every=0.2)
        async def tick(mq: MessageQueue = mq) -> str:
            calls[mq.consumer] += 1
            return mq.consumer

    async with queues[0].running(), queues[1].running(), queues[2].running():
        await wait_for(lambda: sum(calls.values()) >= 8, what="eight ticks")
    ticks = await ticks_in(client, queues[0].stream)
    assert len(ticks) == len(set(ticks)) == sum(calls.values()), ticks


@pytest.mark.slow
def test_three_processes_publish_one_message_per_tick(
    where: str, topic: str, redis_url: str
) -> None:
    """On one node (a plain topic) and on a cluster (4 partitions: the publisher's name
    picks the partition every tick goes to)."""
    partitions = 1 if where == redis_url else 4
    stream = partition_streams(topic, partitions)[partition_for_key("tick", partitions)]
    command = [sys.executable, "-m", "tests.helpers.periodic_process", where, topic]
    processes = [subprocess.Popen([*command, f"c{i}", "3", str(partitions)]) for i in range(3)]
    for process in processes:
        assert process.wait(timeout=30) == 0
    with sync_client(where, stream) as r:
        entries = r.xrange(stream)
    ticks = [json.loads(fields[b"meta"])["periodic_tick"] for _, fields in entries]
    senders = {json.loads(fields[b"data"])["from"] for _, fields in entries}
    assert len(ticks) >= 8, ticks  # 3 s of ticks every 0.2 s, minus start-up
    assert len(ticks) == len(set(ticks)), Counter(ticks).most_common(3)
    assert len(senders) >= 2  # the ticks were shared, not taken by one process alone


async def test_a_plain_function_runs_in_a_thread(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled = handled_messages(mq, "report")

    @mq.periodic("report", every=0.2, meta={"source": "cron"})
    def report() -> dict[str, int]:
        time.sleep(0.01)  # blocking is fine: a worker thread
        return {"rows": 3}

    async with mq.running():
        await wait_for(lambda: len(handled) >= 2, what="two reports")
    assert handled[0].data == {"rows": 3}
    assert handled[0].meta["source"] == "cron"
    tick = datetime.fromisoformat(handled[0].meta["periodic_tick"])
    assert tick.timestamp() * 1000 % 200 == 0


async def test_missed_ticks_are_made_up_only_with_catch_up(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    lazy, eager = make_queue(), make_queue()
    handled_messages(lazy, "lazy")
    handled_messages(eager, "eager")
    lazy.periodic("lazy", every=1)(lambda: 1)
    eager.periodic("eager", every=1, catch_up=True)(lambda: 1)
    ago = int((time.time() // 1 - 5) * 1000)  # five ticks were missed
    await client.hset(record_key(lazy.stream), mapping={"lazy": ago, "eager": ago})

    async def types_published() -> Counter[str]:
        entries = await client.xrange(lazy.stream)
        return Counter(fields[b"type"].decode() for _, fields in entries)

    async def caught_up() -> bool:
        return (await types_published())["eager"] >= 5

    async with lazy.running(), eager.running():
        await wait_for(caught_up, what="the eager publisher making up 5 missed ticks")
        types = await types_published()
    assert types["eager"] >= 5 and types["lazy"] <= 1, types


async def test_an_app_gathers_the_periodic_publishers_of_its_queues(
    make_queue: QueueFactory,
) -> None:
    a, b = make_queue(), make_queue(stream="other-" + str(time.time_ns()))
    a.periodic("x", every=60)(lambda: 1)
    b.periodic("y", cron="0 * * * *")(lambda: 2)
    app = App(a, b)
    assert [(mq.stream, p.name) for mq, p in app.periodics] == [(a.stream, "x"), (b.stream, "y")]


async def test_a_failing_function_skips_its_tick_and_goes_on(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    mq = make_queue()
    handled = handled_messages(mq, "flaky")
    calls = 0

    @mq.periodic("flaky", every=0.2)
    async def flaky() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database down")
        return calls

    async with mq.running():
        await wait_for(lambda: len(handled) >= 1, what="a tick after the failure")
    assert "not published" in caplog.text and "database down" in caplog.text
    pattern = f"{record_key(mq.stream)}:flaky:*"  # each tick's claim
    claims = [await client.get(key) async for key in client.scan_iter(pattern)]
    assert b"skipped" in claims, claims  # given up: no other process calls it again


async def test_the_topic_lists_its_periodic_publishers_with_their_next_tick(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()
    handled = handled_messages(mq, "report")
    mq.periodic("report", every=0.2)(lambda: 1)
    mq.periodic("report", cron="0 * * * *", name="hourly")(lambda: 2)
    mq.periodic("report", cron="0 9 * * *", timezone="Europe/Paris", name="paris")(lambda: 3)
    async with mq.running():
        await wait_for(lambda: len(handled) >= 1, what="a tick")
        rows = {row.name: row for row in await mq.periodic_publishers()}
    assert set(rows) == {"report", "hourly", "paris"}
    assert rows["paris"].timezone == "Europe/Paris" and rows["hourly"].timezone is None
    paris = rows["paris"].next_tick.astimezone(ZoneInfo("Europe/Paris"))
    assert (paris.hour, paris.minute) == (9, 0) and rows["paris"].next_tick.tzinfo == UTC
    assert rows["report"].every == 0.2 and rows["report"].last_tick is not None
    assert rows["hourly"].cron == "0 * * * *" and rows["hourly"].last_tick is None
    assert rows["hourly"].next_tick.minute == 0 and rows["hourly"].type == "report"
    assert rows["report"].next_tick.timestamp() > time.time() - 1


async def test_a_publisher_only_process_runs_its_periodic_publishers_alone(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """``run_periodics()`` without a consumer: a process that publishes and handles nothing
    takes part in the ticks all the same."""
    producer = make_queue()
    producer.periodic("tick", every=0.2)(lambda: 1)
    with anyio.move_on_after(0.7):
        await producer.run_periodics()
    assert len(await ticks_in(client, producer.stream)) >= 2


def test_periodic_without_parentheses_is_refused_saying_what_to_write() -> None:
    """``@mq.periodic`` alone over a function would pass the function as the message type
    and register nothing: refused at once, on a queue and a Router (an App's routers)."""
    mq = MessageQueue("redis://127.0.0.1:1/0", stream="s", group="g")
    router = Router()

    def send_report() -> dict[str, int]:
        return {"n": 1}

    for registry, owner in ((mq, "mq"), (router, "router")):
        with pytest.raises(HandlerError, match=rf'write @{owner}.periodic\("report", every=60\)'):
            registry.periodic(send_report)  # type: ignore[arg-type]
        with pytest.raises(HandlerError, match="above send_report"):
            registry.periodic(send_report, every=60)  # type: ignore[arg-type]
        assert registry.periodics == ()
    assert App(mq, routers=[router]).periodics == []


async def test_terminating_a_partitioned_topic_forgets_its_periodic_publishers(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(partitions=4)
    handled = handled_messages(mq, "report")
    mq.periodic("report", every=0.2)(lambda: 1)
    async with mq:
        async with mq.running():
            await wait_for(lambda: len(handled) >= 1, what="a tick")
            assert [row.name for row in await mq.periodic_publishers()] == ["report"]
        await mq.terminate_topic()
        assert await mq.periodic_publishers() == [], "the terminated topic still lists them"
