"""Cleanup removes only what every group has acknowledged, and nothing else."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import CleanupPolicy, Message, MessageQueue
from streamq._ids import StreamId
from streamq.topic.cleanup import Cleaner, GroupBounds, group_bounds, has_xdelex
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

EAGER = CleanupPolicy(max_stream_length=0, min_retention=0, batch_size=3)


async def read_and_ack(
    client: aioredis.Redis, stream: str, group: str, n: int, skip: int = -1
) -> None:
    """Group ``group`` reads ``n`` entries and acks all of them but index ``skip``."""
    reply = await client.xreadgroup(group, "reader", {stream: ">"}, count=n)
    ids = [entry_id for i, (entry_id, _) in enumerate(reply[0][1]) if i != skip]
    await client.xack(stream, group, *ids)


async def setup(
    make_queue: QueueFactory,
    client: aioredis.Redis,
    policy: CleanupPolicy = EAGER,
    lagging_read: int = 10,
    skip: int = -1,
) -> tuple[MessageQueue, list[str]]:
    """A queue with cleanup ``policy`` and 10 entries, all read and acknowledged by its
    group ``g``; a second group, ``lagging``, has read the first ``lagging_read`` of them
    and acknowledged all of those but index ``skip``."""
    mq = make_queue(cleanup=policy)
    await mq.__aenter__()
    ids = await mq.publish_many("job", list(range(10)))
    await client.xgroup_create(mq.stream, "lagging", id="0")
    await read_and_ack(client, mq.stream, "g", 10)
    await read_and_ack(client, mq.stream, "lagging", lagging_read, skip=skip)
    return mq, ids


async def remaining(client: aioredis.Redis, stream: str) -> list[str]:
    return [i.decode() for i, _ in await client.xrange(stream)]


async def test_only_entries_every_group_acknowledged_go(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, ids = await setup(make_queue, client, lagging_read=4)
    assert await mq.cleanup() == 4
    assert await remaining(client, mq.stream) == ids[4:]


async def test_pending_entry_blocks_its_prefix(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, ids = await setup(make_queue, client, lagging_read=6, skip=2)
    assert await mq.cleanup() == 2
    assert await remaining(client, mq.stream) == ids[2:]


async def test_beyond_pending_removes_acked_entries_above_a_pending_one(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    policy = CleanupPolicy(max_stream_length=0, min_retention=0, batch_size=3, beyond_pending=True)
    mq, ids = await setup(make_queue, client, policy, lagging_read=6, skip=2)
    assert await mq.cleanup() == 5, "pending ids[2] and the 4 entries 'lagging' never read stay"
    assert await remaining(client, mq.stream) == [ids[2], *ids[6:]]
    await client.xack(mq.stream, "lagging", ids[2])
    assert await mq.cleanup() == 1
    assert await remaining(client, mq.stream) == ids[6:]


async def test_server_side_check_used_when_the_server_has_it(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, _ = await setup(make_queue, client)
    report = await Cleaner(mq.client, mq.stream, EAGER).run_once()
    assert report.removed == 10
    assert report.server_checked == await has_xdelex(client), report


async def test_removal_rechecks_what_a_stale_snapshot_would_remove(
    make_queue: QueueFactory, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each removal re-checks every ID on the server, in the step that removes it.

    A snapshot can be stale (a group created or seeked back, an entry stopped or resumed
    during a pass); the server's check still keeps what some group has not read, holds
    pending, or what is stopped.
    """
    mq, ids = await setup(make_queue, client, lagging_read=6, skip=2)
    await mq.stop_message(ids[4])

    async def stale(_client: aioredis.Redis, _stream: str) -> GroupBounds:
        return GroupBounds(read_point=StreamId(2**62, 0), safe_point=StreamId(2**62, 0))

    monkeypatch.setattr("streamq.topic.cleanup.group_bounds", stale)
    assert await mq.cleanup() == 4
    assert await remaining(client, mq.stream) == [ids[2], ids[4], *ids[6:]]


async def test_an_entry_resumed_during_a_pass_is_not_removed(
    make_queue: QueueFactory, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator resumes a stopped entry after the pass took its snapshot of the groups:
    the entry is pending again, and stays until a consumer handles it."""
    mq, ids = await setup(make_queue, client, skip=3)  # ids[3] pending in group 'lagging'
    await mq.stop_message(ids[3])
    snapshot = group_bounds

    async def resumed_after_snapshot(client: aioredis.Redis, stream: str) -> GroupBounds | None:
        bounds = await snapshot(client, stream)
        await mq.resume_message(ids[3])
        return bounds

    monkeypatch.setattr("streamq.topic.cleanup.group_bounds", resumed_after_snapshot)
    assert await mq.cleanup() == 9
    assert await remaining(client, mq.stream) == [ids[3]], "the resumed entry was removed"
    (pending,) = await client.xpending_range(mq.stream, "lagging", min="-", max="+", count=10)
    assert pending["message_id"].decode() == ids[3]


async def test_dry_run_counts_what_a_pass_would_remove(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, ids = await setup(make_queue, client, lagging_read=6, skip=2)
    await mq.stop_message(ids[1])
    report = await Cleaner(mq.client, mq.stream, EAGER).run_once(dry_run=True)
    assert report.removed == 1, report
    assert await remaining(client, mq.stream) == ids


async def test_unrouted_records_of_acknowledged_entries_are_pruned(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, ids = await setup(make_queue, client, lagging_read=4)
    unrouted = f"streamq:{{{mq.stream}}}:unrouted"
    await client.hset(unrouted, mapping={ids[1]: 2, ids[7]: 1})
    await mq.cleanup()
    assert [k.decode() for k in await client.hkeys(unrouted)] == [ids[7]]


async def test_min_retention_and_max_stream_length(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq, ids = await setup(
        make_queue, client, CleanupPolicy(max_stream_length=0, min_retention=3600)
    )
    assert await mq.cleanup() == 0, "entries younger than min_retention were removed"
    mq.set_cleanup_policy(CleanupPolicy(max_stream_length=7, min_retention=0))
    assert await mq.cleanup() == 3
    assert await remaining(client, mq.stream) == ids[3:]
    assert await mq.cleanup() == 0, "never below max_stream_length"


async def test_stopped_ids_are_kept(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    mq, ids = await setup(make_queue, client)
    await mq.stop_message(ids[3])
    assert await mq.cleanup() == 9
    assert await remaining(client, mq.stream) == [ids[3]]


async def test_stream_without_groups_is_never_cleaned(redis_url: str, stream: str) -> None:
    mq = MessageQueue(redis_url, stream=stream, cleanup=EAGER)
    await mq.publish_many("job", [1, 2, 3])
    assert await mq.cleanup() == 0
    report = await Cleaner(mq.client, stream, EAGER).run_once()
    assert report.skipped == "stream has no consumer group"
    await mq.aclose()


async def test_one_cleaner_at_a_time(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    mq, _ = await setup(make_queue, client)
    cleaners = [Cleaner(mq.client, mq.stream, EAGER) for _ in range(4)]
    lock = f"streamq:{{{mq.stream}}}:cleanup-lock"
    await client.set(lock, "someone-else", px=500)
    report = await cleaners[0].run_once()
    assert report.skipped == "another cleaner holds the lock" and report.removed == 0
    # the lock expires: a crashed cleaner does not block for ever
    await wait_for(lambda: _gone(client, lock), what="the lock to expire")
    removed = 0
    async with anyio.create_task_group() as tg:

        async def run(cleaner: Cleaner) -> None:
            nonlocal removed
            removed += (await cleaner.run_once()).removed

        for cleaner in cleaners:
            tg.start_soon(run, cleaner)
    assert removed == 10 and await client.xlen(mq.stream) == 0


async def _gone(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)


def consumers(
    make_queue: QueueFactory, count: int, policy: CleanupPolicy
) -> tuple[list[MessageQueue], list[str]]:
    """``count`` consumers of one stream with cleanup ``policy``; their ``job`` handlers
    keep the ID of each message handled, in the list returned beside them."""
    handled: list[str] = []
    queues = [make_queue(consumer=f"c{i}", cleanup=policy) for i in range(count)]
    for mq in queues:

        @mq.handler("job")
        async def handle(msg: Message[int]) -> None:
            handled.append(msg.id)

    return queues, handled


async def test_periodic_cleanup_with_consumers_never_removes_unread(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    policy = CleanupPolicy(enabled=True, interval=0.1, max_stream_length=0, min_retention=0)
    queues, handled = consumers(make_queue, 3, policy)
    async with anyio.create_task_group() as tg:
        for mq in queues:
            await mq.__aenter__()
        await client.xgroup_create(queues[0].stream, "lagging", id="$")
        ids = await queues[0].publish_many("job", list(range(200)))
        for mq in queues:
            tg.start_soon(mq.run)
        await wait_for(lambda: len(handled) == 200)
        await anyio.sleep(0.5)  # several cleanup passes by three cleaners
        assert await client.xlen(queues[0].stream) == 200, "removed entries 'lagging' never read"
        await read_and_ack(client, queues[0].stream, "lagging", 150)

        async def cleaned_to_150() -> bool:
            return await remaining(client, queues[0].stream) == ids[150:]

        await wait_for(cleaned_to_150, what="cleanup of the 150 entries both groups acked")
        for mq in queues:
            await mq.stop()


@pytest.mark.slow
async def test_stream_stays_bounded_under_load(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    policy = CleanupPolicy(enabled=True, interval=0.1, max_stream_length=1000, min_retention=0)
    queues, handled = consumers(make_queue, 2, policy)
    peak = 0
    async with anyio.create_task_group() as tg:
        for mq in queues:
            await mq.__aenter__()
            tg.start_soon(mq.run)
        for _ in range(20):
            await queues[0].publish_many("job", list(range(1000)))
            peak = max(peak, await client.xlen(queues[0].stream))
            await anyio.sleep(0.05)
        await wait_for(lambda: len(handled) >= 20_000, timeout=30)

        async def at_policy() -> bool:
            length: int = await client.xlen(queues[0].stream)
            return length <= 1000

        await wait_for(at_policy, what="length back at max_stream_length")
        for mq in queues:
            await mq.stop()
    assert peak < 10_000, f"stream grew to {peak} while cleanup was on"
