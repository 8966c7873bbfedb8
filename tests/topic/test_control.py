"""Stop/resume of message IDs, topic termination, start positions, seek, topic_info."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import (
    ConfigError,
    Message,
    MessageNotFoundError,
    MessageQueue,
    Reject,
    RetryPolicy,
    StartFrom,
)
from streamq.wire.keys import Keys
from tests.helpers.cli import streamq
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio


def recorder(mq: MessageQueue, into: list[str]) -> None:
    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        into.append(msg.id)


async def test_stopped_entry_is_handled_by_no_consumer_of_any_group(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    a, b = make_queue(group="g"), make_queue(group="g2")
    seen_a: list[str] = []
    seen_b: list[str] = []
    recorder(a, seen_a)
    recorder(b, seen_b)
    async with a, b:
        ids = await a.publish_many("job", [1, 2, 3])
        await a.stop_message(ids[1])
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run)
            tg.start_soon(b.run)
            await wait_for(lambda: len(seen_a) == 2 and len(seen_b) == 2)
            await anyio.sleep(0.3)
            await a.stop()
            await b.stop()
        assert seen_a == seen_b == [ids[0], ids[2]]
        assert await pending_count(client, a.stream, "g") == 0
        assert await pending_count(client, a.stream, "g2") == 0
        info = await a.topic_info()
        assert info.stopped_ids == [ids[1]] and info.dead_letters == 0


async def test_stop_while_running_cancels_then_resume_handles_once(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    runs: list[tuple[str, int]] = []
    cancelled: list[str] = []
    block = True

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        runs.append((msg.id, msg.delivery_count))
        try:
            while block:
                await anyio.sleep(0.02)
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise

    async with mq:
        (entry_id,) = await mq.publish_many("job", [1])
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: len(runs) == 1)
            await mq.stop_message(entry_id)
            await wait_for(lambda: cancelled == [entry_id], what="the running handler cancelled")
            assert await pending_count(client, mq.stream, "g") == 0
            assert (await mq.topic_info()).dead_letters == 0
            block = False
            await anyio.sleep(0.3)
            assert len(runs) == 1, "a stopped entry must not run again before resume"
            await mq.resume_message(entry_id)
            await wait_for(lambda: len(runs) == 2, what="the resumed entry to run")
            await anyio.sleep(0.5)
            await mq.stop()
        assert [r[0] for r in runs] == [entry_id, entry_id], "same ID, handled once more"
        assert await pending_count(client, mq.stream, "g") == 0
        assert await mq.stopped_messages() == []


async def test_stop_survives_consumer_restart_and_resume_reaches_new_consumer(
    make_queue: QueueFactory,
) -> None:
    first = make_queue(consumer="same")
    seen: list[str] = []
    recorder(first, seen)
    async with first:
        ids = await first.publish_many("job", [1, 2])
        await first.stop_message(ids[0])
        await run_until(first, lambda: seen == [ids[1]])
    second = make_queue(consumer="same")
    recorder(second, seen)
    async with second, anyio.create_task_group() as tg:
        assert await second.stopped_messages() == [ids[0]]
        tg.start_soon(second.run)
        await anyio.sleep(0.4)
        assert seen == [ids[1]], "stopped entry handled after a restart"
        await second.resume_message(ids[0])
        await wait_for(lambda: seen == [ids[1], ids[0]])
        await second.stop()


async def test_stop_of_unknown_id_is_a_clear_error(make_queue: QueueFactory) -> None:
    mq = make_queue()
    async with mq:
        await mq.publish("job", 1)
        with pytest.raises(MessageNotFoundError, match="does not exist"):
            await mq.stop_message("1-1")
        with pytest.raises(MessageNotFoundError, match="not stopped"):
            await mq.resume_message("1-1")


@pytest.mark.auto_stop
async def test_terminate_stops_every_consumer_at_once_and_topic_is_reusable(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    queues = [make_queue(consumer=f"c{i}", block=10.0) for i in range(3)]
    handled: list[str] = []
    for mq in queues:
        recorder(mq, handled)
    async with anyio.create_task_group() as tg:
        for mq in queues:
            await mq.__aenter__()
            tg.start_soon(mq.run)
        await queues[0].publish_many("job", [1, 2, 3])
        await wait_for(lambda: len(handled) == 3)
        await queues[0].stop_message(await queues[0].publish("job", 4))
        started = anyio.current_time()
        await queues[0].terminate_topic()
        with anyio.fail_after(1.0):
            for mq in queues:
                await mq.done.wait()
        elapsed = anyio.current_time() - started
    for mq in queues:
        assert (mq.auto_stopped, mq.stop_reason) == (True, "topic_terminated")
    assert elapsed < 1.0
    keys = Keys(queues[0].stream)
    assert not await client.exists(queues[0].stream, keys.stopped, keys.dead_letters)

    again = make_queue(consumer="new")
    seen: list[str] = []
    recorder(again, seen)
    async with again:
        new_id = await again.publish("job", 5)
        await run_until(again, lambda: seen == [new_id])


async def test_terminate_can_keep_dead_letters(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    async with mq:
        await mq.publish("job", 1)
        await client.xadd(Keys(mq.stream).dead_letters, {"type": "job", "data": "1"})
        await mq.terminate_topic(keep_dead_letters=True)
        assert await client.xlen(Keys(mq.stream).dead_letters) == 1
        assert not await client.exists(mq.stream)


async def test_a_partitioned_topic_terminated_keeping_its_dead_letters_still_lists_them(
    make_queue: QueueFactory, redis_url: str
) -> None:
    """The letters of every partition are kept, and ``streamq dlq list`` (which opens the
    topic knowing only its name) lists them: the topic's shape stays recorded while its
    letters are. A later terminate deletes both."""
    mq = make_queue(partitions=4, retry=RetryPolicy(attempts=1, max_deliveries=1))
    mq.handler("job")(reject_all)
    async with mq:
        await mq.publish_many("job", list(range(8)), key=str)
        await run_until(mq, lambda: mq.stats().get("dead_lettered") == 8)
        await mq.terminate_topic(keep_dead_letters=True)
    listed = await anyio.to_thread.run_sync(
        lambda: streamq("dlq", "list", mq.stream, url=redis_url)
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("rejected: refused") == 8, listed.stdout
    async with mq:
        await mq.terminate_topic()
    gone = await anyio.to_thread.run_sync(lambda: streamq("dlq", "list", mq.stream, url=redis_url))
    assert gone.returncode == 1 and "does not exist" in gone.stderr, gone.stdout


async def reject_all(msg: Message[int]) -> None:
    raise Reject("refused")


async def test_start_positions_and_seek(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    publisher = make_queue()
    async with publisher:
        ids = await publisher.publish_many("job", [1, 2, 3, 4])

    for start, expected in [
        (StartFrom.EARLIEST, ids),
        (StartFrom.at(ids[1]), ids[2:]),
    ]:
        seen: list[str] = []
        mq = make_queue(group=f"g-{start.position}", start=start)
        recorder(mq, seen)
        async with mq:
            await run_until(mq, lambda: len(seen) == len(expected))  # noqa: B023
        assert seen == expected

    latest: list[str] = []
    mq = make_queue(group="g-latest", start=StartFrom.LATEST)
    recorder(mq, latest)
    async with mq:
        await mq.seek(ids[2])  # move the new group back: it now delivers ids[3]
        await run_until(mq, lambda: latest == [ids[3]])
        with pytest.raises(ConfigError, match="invalid stream entry ID"):
            await mq.seek("last tuesday")


async def test_topic_info_matches_xinfo(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    mq = make_queue()
    async with mq:
        ids = await mq.publish_many("job", list(range(5)))
        await client.xreadgroup("g", "reader", {mq.stream: ">"}, count=2)
        await mq.stop_message(ids[4])
        info = await mq.topic_info()
    raw = await client.xinfo_stream(mq.stream)
    assert (info.length, info.first_id, info.last_id) == (raw["length"], ids[0], ids[-1])
    group = info.group("g")
    assert group.pending == 2 and group.last_delivered_id == ids[1]
    assert group.lag == 3
    assert group.oldest_pending_id == ids[0] and group.oldest_pending_age_ms is not None
    assert {c.name: c.pending for c in group.consumers} == {"reader": 2}
    assert info.stopped_ids == [ids[4]] and info.dead_letters == 0
