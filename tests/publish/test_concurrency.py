"""Publishing from many tasks or threads at once on one queue (a web service publishes from
every request at once): every call succeeds, waiting for a connection when the pool is
busy, and every message lands once."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Publisher
from tests.helpers.clients import sync_client
from tests.helpers.jobs import (
    Job,
    in_id_order,
    jobs,
    publish_from_tasks,
    publish_from_threads,
    sync_jobs,
)
from tests.helpers.queues import QueueFactory

TASKS = 200
THREADS = 64
PER_THREAD = 5


@pytest.mark.anyio
async def test_concurrent_publishes_on_one_queue_all_succeed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    async with mq:
        ids = await publish_from_tasks(mq, TASKS)
    assert len(ids) == TASKS and len(set(ids.values())) == TASKS
    assert sorted(await jobs(client, mq.stream)) == list(range(TASKS))
    assert in_id_order(ids) == await jobs(client, mq.stream)  # each ID is its own message's


@pytest.mark.anyio
async def test_concurrent_publish_many_on_one_queue_all_succeed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    batches: list[list[str]] = []

    async def publish_many(start: int) -> None:
        batches.append(await mq.publish_many("job", [Job(i=start + k) for k in range(10)]))

    async with mq, anyio.create_task_group() as tg:
        for start in range(0, TASKS * 10, 10):
            tg.start_soon(publish_many, start)
    assert len({i for batch in batches for i in batch}) == TASKS * 10
    assert sorted(await jobs(client, mq.stream)) == list(range(TASKS * 10))


def test_threads_share_one_sync_publisher(redis_url: str, stream: str) -> None:
    with Publisher(redis_url, stream=stream) as publisher:
        ids = publish_from_threads(publisher, THREADS, PER_THREAD)
    assert len(set(ids)) == THREADS * PER_THREAD
    with sync_client(redis_url, stream) as client:
        got = sorted(sync_jobs(client, stream))
    assert got == list(range(THREADS * PER_THREAD))
