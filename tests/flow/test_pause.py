"""Pausing a group or one type: the record on the server, its notice, a running consumer's
view of it (``PauseWatch``), and damaged records."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from functools import partial

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, EmbeddedServer, MessageQueue
from streamq.flow.pause import notice, notice_group, pause, paused, paused_groups, resume
from streamq.flow.watch import PauseWatch
from streamq.wire.client import connect
from streamq.wire.damage import damaged_counts
from streamq.wire.keys import Keys
from streamq.wire.records import PausedRecord
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def targets(records: list[PausedRecord]) -> list[str]:
    return [r.target for r in records]


# -- the record -----------------------------------------------------------------------
async def test_pausing_writes_the_group_record_and_resuming_removes_it(
    raw: aioredis.Redis, stream: str
) -> None:
    assert await pause(raw, stream, "g") is True
    assert await pause(raw, stream, "g") is False  # paused already: its time kept
    assert await pause(raw, stream, "g", "email") is True
    assert targets(await paused(raw, stream, "g")) == ["*", "email"]
    fields = await raw.hgetall(Keys(stream).paused("g"))
    assert set(fields) == {b"*", b"email"}
    assert abs(int(fields[b"*"]) - time.time() * 1000) < 5000
    assert targets(await paused(raw, stream, "other")) == []  # per group
    assert await resume(raw, stream, "g") is True
    assert targets(await paused(raw, stream, "g")) == ["email"]  # paused on its own: stays
    assert await resume(raw, stream, "g") is False
    assert await resume(raw, stream, "g", "email") is True
    assert not await raw.exists(Keys(stream).paused("g"))


async def test_the_paused_groups_of_a_topic_are_read_in_one_call(
    raw: aioredis.Redis, stream: str
) -> None:
    await pause(raw, stream, "a")
    await pause(raw, stream, "b", "sms")
    await pause(raw, stream, "b", "email")
    found = await paused_groups(raw, stream, ["a", "b", "c", "a"])
    assert found == {"a": ["*"], "b": ["email", "sms"]}
    assert await paused_groups(raw, stream, []) == {}


@pytest.mark.parametrize("type_name", ["bad type", "", "x" * 129, "é"])
async def test_pausing_a_name_that_is_no_message_type_is_refused(
    raw: aioredis.Redis, stream: str, type_name: str
) -> None:
    with pytest.raises(ConfigError, match="pause/resume type"):
        await pause(raw, stream, "g", type_name)
    with pytest.raises(ConfigError, match="pause/resume type"):
        await resume(raw, stream, "g", type_name)
    assert not await raw.exists(Keys(stream).paused("g"))


def test_a_notice_names_its_group_and_anything_else_names_none() -> None:
    assert notice_group(notice("g:1")) == "g:1"
    for data in (b"", b"[]", b'{"op": "stop"}', b'{"op": "paused", "group": 3}', b"x" * 600):
        assert notice_group(data) is None


@pytest.mark.parametrize(
    ("write", "field"),
    [
        (("hset", "bad type!", "1700"), "bad type!"),
        (("hset", "email", "yesterday"), "email"),
        (("set", "paused", ""), "(the key)"),
    ],
)
async def test_a_damaged_pause_record_is_logged_once_counted_and_not_obeyed(
    raw: aioredis.Redis,
    stream: str,
    caplog: pytest.LogCaptureFixture,
    write: tuple[str, str, str],
    field: str,
) -> None:
    key = Keys(stream).paused("g")
    if write[0] == "hset":
        await raw.hset(key, write[1], write[2])
        await raw.hset(key, "sms", "1700")  # a good field beside it is obeyed
    else:
        await raw.set(key, write[1])
    before = damaged_counts().get("paused", 0)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            found = targets(await paused(raw, stream, "g"))
            assert found == (["sms"] if write[0] == "hset" else [])
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1 and f"field {field!r}" in logged[0] and "not obeyed" in logged[0]
    assert damaged_counts()["paused"] == before + 1


def eq(watch: PauseWatch, expected: set[str]) -> bool:
    return watch.targets == expected


# -- the watch ------------------------------------------------------------------------
@pytest.fixture
async def watch_client(redis_url: str, stream: str) -> AsyncIterator[aioredis.Redis]:
    """The watch's own connection (as a consumer's would be)."""
    deployment = connect(redis_url)
    yield deployment.client_for(stream)
    await deployment.aclose()


async def test_a_watch_started_on_a_paused_group_sees_it_before_it_is_ready(
    raw: aioredis.Redis, watch_client: aioredis.Redis, stream: str
) -> None:
    await pause(raw, stream, "g", "email")  # as left by a consumer before its restart
    watch = PauseWatch(watch_client, stream, "g")
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        assert watch.paused("email") and not watch.paused("sms")
        assert watch.targets == frozenset({"email"})
        tg.cancel_scope.cancel()


async def test_a_pause_reaches_a_watch_at_once_through_its_notice(
    raw: aioredis.Redis, watch_client: aioredis.Redis, stream: str
) -> None:
    changes: list[frozenset[str]] = []
    watch = PauseWatch(  # no poll during the test: a minute apart
        watch_client, stream, "g", interval=60, on_change=lambda: changes.append(watch.targets)
    )
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        await anyio.sleep(0.2)  # subscribed
        for act, expected in ((pause, {"*"}), (resume, set())):
            started = time.monotonic()
            await act(raw, stream, "g")
            await wait_for(partial(eq, watch, expected), timeout=5, what=str(expected))
            assert time.monotonic() - started < 0.5  # the notice, not a poll a minute away
        tg.cancel_scope.cancel()
    assert changes == [frozenset({"*"}), frozenset()]


async def test_a_pause_without_notice_reaches_a_watch_by_its_next_read(
    raw: aioredis.Redis, watch_client: aioredis.Redis, stream: str
) -> None:
    watch = PauseWatch(watch_client, stream, "g", interval=0.2)
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        await raw.hset(Keys(stream).paused("g"), "*", str(int(time.time() * 1000)))  # no notice
        started = time.monotonic()
        await wait_for(lambda: watch.paused("email"), timeout=5, what="the poll")
        assert time.monotonic() - started < 1.0
        tg.cancel_scope.cancel()


async def test_a_notice_for_another_group_is_not_this_watch_s(
    raw: aioredis.Redis, watch_client: aioredis.Redis, stream: str
) -> None:
    watch = PauseWatch(watch_client, stream, "g", interval=60)
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        await anyio.sleep(0.2)  # subscribed
        await pause(raw, stream, "other")
        await raw.hset(Keys(stream).paused("g"), "*", "1700")  # written without notice
        await anyio.sleep(0.5)
        assert not watch.paused("email")  # nothing told this watch to read again
        await pause(raw, stream, "g", "sms")  # its own notice: it reads the whole record
        await wait_for(lambda: watch.targets == {"*", "sms"}, timeout=5, what="both")
        tg.cancel_scope.cancel()


async def test_waiting_for_a_resume_returns_when_the_type_may_run(
    raw: aioredis.Redis, watch_client: aioredis.Redis, stream: str
) -> None:
    await pause(raw, stream, "g")
    await pause(raw, stream, "g", "email")
    watch = PauseWatch(watch_client, stream, "g", interval=60)
    done: list[str] = []

    async def waiter(type_name: str) -> None:
        await watch.wait_unpaused(type_name)
        done.append(type_name)

    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        tg.start_soon(waiter, "email")
        tg.start_soon(waiter, "sms")
        await anyio.sleep(0.3)
        assert done == []
        await resume(raw, stream, "g")  # the group: sms may run, email is paused on its own
        await wait_for(lambda: done == ["sms"], timeout=5, what="sms")
        await anyio.sleep(0.2)
        assert done == ["sms"]
        await resume(raw, stream, "g", "email")
        await wait_for(lambda: done == ["sms", "email"], timeout=5, what="email")
        await watch.wait_unpaused("email")  # not paused: at once
        tg.cancel_scope.cancel()


async def test_a_watch_keeps_what_it_read_while_the_server_is_out_of_reach(
    stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    with EmbeddedServer() as server:  # a server of its own, to stop under the watch
        deployment = connect(server.url)
        client = deployment.client_for(stream)
        await pause(client, stream, "g")
        watch = PauseWatch(client, stream, "g", interval=0.1)
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run)
            assert watch.paused("email")
            server.stop()
            with caplog.at_level(logging.WARNING):
                await anyio.sleep(0.6)
            assert watch.paused("email")  # an outage resumes nothing
            tg.cancel_scope.cancel()
        await deployment.aclose()
    warned = [r for r in caplog.records if "cannot read the pause record" in r.getMessage()]
    assert len(warned) == 1 and "keeping what was read last (paused: *)" in warned[0].getMessage()


async def test_pauses_work_on_the_topic_slot_of_a_node_and_of_a_cluster(
    where: str, topic: str
) -> None:
    deployment = connect(where)
    try:
        client = deployment.client_for(topic)
        watch = PauseWatch(client, topic, "g", interval=60)
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run)
            await anyio.sleep(0.2)  # subscribed (sharded, on the topic's slot)
            await pause(client, topic, "g", "email")
            await wait_for(lambda: watch.paused("email"), timeout=5, what="the notice")
            assert await paused_groups(client, topic, ["g"]) == {"g": ["email"]}
            tg.cancel_scope.cancel()
    finally:
        await deployment.aclose()


# -- through the queue ----------------------------------------------------------------
async def test_a_queue_pauses_and_resumes_its_group_and_topic_info_shows_it(
    make_queue: QueueFactory,
) -> None:
    mq, other = make_queue(), make_queue(group="g2")
    async with mq, other:
        await mq.publish("job", 1)  # the topic exists: topic_info lists its groups
        assert await mq.pause() is True and await mq.pause("email") is True
        assert await mq.pause() is False
        assert await mq.paused() == ["*", "email"]
        assert await other.paused() == []  # another group
        await other.pause("sms")
        info = await mq.topic_info()
        assert info.paused == {"g": ["*", "email"], "g2": ["sms"]}
        assert await mq.resume() is True and await mq.resume() is False
        assert await mq.resume("email") is True
        assert (await other.topic_info()).paused == {"g2": ["sms"]}


async def test_a_pause_persists_for_a_queue_opened_later(make_queue: QueueFactory) -> None:
    async with make_queue() as first:
        await first.pause("email")
    async with make_queue() as later:  # another process, after a restart
        assert await later.paused() == ["email"]


async def test_pausing_a_fan_out_queue_is_refused(make_queue: QueueFactory) -> None:
    mq = make_queue(group=None)
    for operation in (mq.pause, mq.resume, mq.paused):
        with pytest.raises(ConfigError, match=r"fan-out queue .* has no consumer group"):
            await operation()


async def test_terminating_the_topic_removes_its_pause_records(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    async with make_queue() as mq:
        await mq.publish("job", 1)
        await mq.pause()
        await mq.terminate_topic()
        assert not await client.exists(Keys(mq.stream).paused("g"))
        assert await mq.paused() == []


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_partitioned_topic_keeps_one_pause_record_on_its_own_slot(
    where: str, topic: str, partitions: int
) -> None:
    mq = MessageQueue(where, stream=topic, group="g", partitions=partitions)
    async with mq:
        await mq.publish("job", 1)
        await mq.pause("job")
        assert await mq.client.hkeys(Keys(topic).paused("g")) == [b"job"]
        for stream in mq.streams if partitions > 1 else ():  # nothing on the partitions
            assert not await mq.client_for(stream).exists(Keys(stream).paused("g"))
        assert (await mq.topic_info()).paused == {"g": ["job"]}
        await mq.terminate_topic()
        assert not await mq.client.exists(Keys(topic).paused("g"))
