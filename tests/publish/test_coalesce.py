"""Coalesced publishing (streamq.publish.coalesce): concurrent publishes on one queue share
pipelined writes on one connection, each caller gets its own ID or its own error, queued
callers that are cancelled are not published, a cancelled writer does not fail the others,
and the queue is bounded. The server's writes are held with ``CLIENT PAUSE ... WRITE`` to
catch callers while they queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import (
    EmbeddedServer,
    MessageQueue,
    Publisher,
    RedisFailure,
    ServerUnavailableError,
    StreamId,
)
from streamq.publish import coalesce
from streamq.publish.coalesce import Coalescer, Lane
from streamq.publish.coalesce_blocking import SyncCoalescer
from streamq.publish.turns import destination
from streamq.wire.client import connect
from tests.helpers.clients import sync_client
from tests.helpers.jobs import (
    Job,
    in_id_order,
    jobs,
    publish_from_tasks,
    publish_from_threads,
    publish_into,
    sync_jobs,
)
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

TASKS = 200


async def connections_received(client: aioredis.Redis) -> int:
    return int((await client.info("stats"))["total_connections_received"])


@pytest.fixture
async def paused(client: aioredis.Redis) -> AsyncIterator[aioredis.Redis]:
    """Yields the raw client; the test pauses the server's writes with it, and they are
    resumed at the end whatever happens."""
    try:
        yield client
    finally:
        await client.execute_command("CLIENT", "UNPAUSE")


async def pause_writes(client: aioredis.Redis) -> None:
    await client.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")


async def queue_and_lane(make_queue: QueueFactory) -> tuple[MessageQueue, Lane]:
    """A queue and its one lane, whose connection is open (a job ``i=-1`` published): a
    pause of the server's writes holds what it sends next."""
    mq = make_queue()
    await mq.publish("job", Job(i=-1))
    return mq, the_lane(mq)


def the_lane(mq: MessageQueue) -> Lane:
    """The queue's one coalescing lane (white box: its connection is what these tests hold)."""
    publishing = mq._checked._publishing
    return next(iter(publishing._coalescer_on(mq._topic.deployment)._lanes.values()))


async def queue_and_paused_lane(
    make_queue: QueueFactory, paused: aioredis.Redis
) -> tuple[MessageQueue, Lane]:
    """``queue_and_lane``, then the server's writes paused."""
    mq, lane = await queue_and_lane(make_queue)
    await pause_writes(paused)
    return mq, lane


async def test_200_concurrent_publishes_use_one_connection_and_get_their_own_ids(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    # a topic that exists (its consumers made it): publishes that find their stream missing
    # check the topic's shape again, on a connection of the pool
    await client.xgroup_create(mq.stream, "consumers", id="$", mkstream=True)
    before = await connections_received(client)
    ids = await publish_from_tasks(mq, TASKS)
    opened = await connections_received(client) - before
    assert opened == 1, f"{TASKS} concurrent publishes opened {opened} connections, not one"
    assert len(set(ids.values())) == TASKS
    assert in_id_order(ids) == await jobs(client, mq.stream), "an ID is not its own message's"


async def test_a_write_carries_every_publish_queued_behind_it(
    make_queue: QueueFactory, paused: aioredis.Redis
) -> None:
    mq, lane = await queue_and_paused_lane(make_queue, paused)
    ids: dict[int, str] = {}
    publish = publish_into(mq, ids)

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(publish, i)
        await wait_for(lambda: lane.queued == 49, what="49 publishes queued behind the first")
        await paused.execute_command("CLIENT", "UNPAUSE")
    assert sorted(ids) == list(range(50)) and len(set(ids.values())) == 50
    assert await jobs(paused, mq.stream) == [-1, *in_id_order(ids)]


async def test_each_caller_gets_its_own_error_in_a_shared_write(
    redis_url: str, stream: str, paused: aioredis.Redis
) -> None:
    deployment = connect(redis_url)
    client = deployment.client_for(stream)
    coalescer = Coalescer()
    await coalescer.xadd(client, stream, {"type": "job", "data": "{}"})
    await pause_writes(paused)
    outcomes: dict[int, Any] = {}

    async def add(i: int) -> None:
        bad = ("MAXLEN", "not-a-number") if i % 2 else ()
        try:
            outcomes[i] = await coalescer.xadd(client, stream, {"i": str(i)}, bad)
        except RedisFailure as e:
            outcomes[i] = e

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(add, i)
        (lane,) = coalescer._lanes.values()
        await wait_for(lambda: lane.queued == 19, what="19 adds queued behind the first")
        await paused.execute_command("CLIENT", "UNPAUSE")
    await coalescer.aclose()
    await deployment.aclose()
    errors = {i for i, o in outcomes.items() if isinstance(o, RedisFailure)}
    assert errors == set(range(1, 20, 2)), f"errors went to the wrong callers: {outcomes}"
    rows = await paused.xrange(stream)
    assert [f[b"i"] for _, f in rows[1:]] == [str(i).encode() for i in range(0, 20, 2)]


async def test_cancelled_queued_callers_are_not_published_and_the_rest_are(
    make_queue: QueueFactory, paused: aioredis.Redis
) -> None:
    mq, lane = await queue_and_paused_lane(make_queue, paused)
    ids: dict[int, str] = {}
    publish = publish_into(mq, ids)

    async with anyio.create_task_group() as kept:
        kept.start_soon(publish, 0)  # sent alone, held by the pause
        await wait_for(lambda: lane.queued == 0 and lane.busy, what="the first write sent")
        async with anyio.create_task_group() as doomed:
            for i in range(1, 11):
                doomed.start_soon(publish, 100 + i)
            for i in range(1, 11):
                kept.start_soon(publish, i)
            await wait_for(lambda: lane.queued == 20, what="20 publishes queued")
            doomed.cancel_scope.cancel()
        assert lane.queued == 10, "cancelled callers stayed in the queue"
        await paused.execute_command("CLIENT", "UNPAUSE")
    assert sorted(ids) == list(range(11))
    assert sorted(await jobs(paused, mq.stream)) == list(range(-1, 11))


async def test_a_cancelled_leader_still_delivers_the_others_write(
    make_queue: QueueFactory, paused: aioredis.Redis
) -> None:
    mq, lane = await queue_and_lane(make_queue)
    ids: dict[int, str] = {}
    publish = publish_into(mq, ids)

    lane._busy = True  # as if a write were in flight: callers queue behind it
    async with anyio.create_task_group() as tg, anyio.create_task_group() as leader:
        leader.start_soon(publish, 1)  # first in the queue: it writes the next batch
        await wait_for(lambda: lane.queued == 1, what="the leader queued")
        for i in range(2, 12):
            tg.start_soon(publish, i)
        await wait_for(lambda: lane.queued == 11, what="11 publishes queued")
        await pause_writes(paused)
        lane._hand_over()  # the write in flight is done: 1 leads the next one
        await wait_for(lambda: lane.queued == 0, what="the leader took the queue")
        leader.cancel_scope.cancel()  # while its write is held by the pause
        await paused.execute_command("CLIENT", "UNPAUSE")
    # the leader's own ID may have come back before the cancellation took (its write was
    # shielded); the others' must have
    assert set(range(2, 12)) <= set(ids), "the others' write failed with its leader"
    assert sorted(await jobs(paused, mq.stream)) == [-1, *range(1, 12)], "the write was cut"
    assert not lane.busy


async def test_callers_wait_for_room_past_the_bound(
    make_queue: QueueFactory, paused: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coalesce, "MAX_QUEUED", 5)
    mq, lane = await queue_and_paused_lane(make_queue, paused)
    ids: dict[int, str] = {}

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(publish_into(mq, ids), i)
        await wait_for(lambda: lane.queued == 5, what="5 queued")
        await anyio.sleep(0.1)
        assert lane.queued == 5, "the queue grew past its bound"
        await paused.execute_command("CLIENT", "UNPAUSE")
    assert sorted(ids) == list(range(20)) and len(set(ids.values())) == 20
    assert sorted(await jobs(paused, mq.stream)) == list(range(-1, 20))


async def test_a_publish_after_the_server_closed_the_idle_connection_reconnects(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    first = await mq.publish("job", Job(i=1))
    lane = the_lane(mq)
    kept = lane._connection._connection
    await client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    await wait_for(lambda: kept._reader is None or kept._reader.at_eof(), what="the close seen")
    second = await mq.publish("job", Job(i=2))  # on a new connection, as a pool would do
    assert StreamId.parse(second) > StreamId.parse(first)
    assert await jobs(client, mq.stream) == [1, 2]


def test_destination_tells_slots_apart_and_clients_of_one_slot_together(redis_url: str) -> None:
    deployment = connect(redis_url)
    a1, a2, b = (deployment.client_for(s) for s in ("a", "a", "b"))
    assert destination(a1) == destination(a2) != destination(b)


# -- the sync Publisher across threads --------------------------------------------------


def test_threads_publishing_at_once_share_one_connection(redis_url: str, stream: str) -> None:
    threads, each = 32, 20
    with sync_client(redis_url, stream) as raw:
        raw.xgroup_create(stream, "consumers", id="$", mkstream=True)  # as above
        before = int(raw.info("stats")["total_connections_received"])
        with Publisher(redis_url, stream=stream) as publisher:
            ids = publish_from_threads(publisher, threads, each)
        opened = int(raw.info("stats")["total_connections_received"]) - before
        got = sorted(sync_jobs(raw, stream))
    assert opened == 1, f"{threads} threads opened {opened} connections, not one"
    assert len(set(ids)) == threads * each
    assert got == list(range(threads * each))


def test_threads_get_their_own_errors(redis_url: str, stream: str) -> None:
    with sync_client(redis_url, stream) as client:
        coalescer = SyncCoalescer()

        def add(i: int) -> object:
            bad = ("MAXLEN", "not-a-number") if i % 2 else ()
            try:
                return coalescer.xadd(client, stream, {"i": str(i)}, bad)
            except RedisFailure as e:
                return e

        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(add, range(200)))
        coalescer.close()
        assert {i for i, o in enumerate(outcomes) if isinstance(o, Exception)} == set(
            range(1, 200, 2)
        )
        assert sorted(int(f[b"i"]) for _, f in client.xrange(stream)) == list(range(0, 200, 2))


@pytest.mark.slow
async def test_a_failed_publish_raises_streamqs_errors(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """The fast path's errors are translated as before: a key of another type is a
    RedisFailure; a server that is gone, on a single node, a ServerUnavailableError at once."""
    mq = make_queue()
    await client.set(mq.stream, "not a stream")
    with pytest.raises(RedisFailure, match="WRONGTYPE"):
        await mq.publish("job", Job(i=1))
    await client.delete(mq.stream)
    with EmbeddedServer() as server:
        gone = MessageQueue(server.url, stream="s")
        await gone.publish("job", Job(i=1))  # the lane's connection is open
        server.stop()
        with anyio.fail_after(5), pytest.raises(ServerUnavailableError):
            await gone.publish("job", Job(i=2))
        await gone.aclose()
