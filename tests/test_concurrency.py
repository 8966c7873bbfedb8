"""Publishing from many tasks or threads at once on one queue (a web service publishes from
every request at once): every call succeeds, waiting for a connection when the pool is
busy, and every message lands once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import Publisher, StreamId
from tests.conftest import QueueFactory, sync_client

TASKS = 200
THREADS = 64
PER_THREAD = 5


class Job(BaseModel):
    i: int


async def published(client: aioredis.Redis, stream: str) -> list[int]:
    """The ``i`` of every entry of ``stream``, in stream order."""
    rows = await client.xrange(stream)
    return [Job.model_validate_json(fields[b"data"]).i for _, fields in rows]


@pytest.mark.anyio
async def test_concurrent_publishes_on_one_queue_all_succeed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    ids: dict[int, str] = {}

    async def publish(i: int) -> None:
        ids[i] = await mq.publish("job", Job(i=i))

    async with mq, anyio.create_task_group() as tg:
        for i in range(TASKS):
            tg.start_soon(publish, i)
    assert len(ids) == TASKS and len(set(ids.values())) == TASKS
    assert sorted(await published(client, mq.stream)) == list(range(TASKS))
    by_id = sorted(ids, key=lambda i: StreamId.parse(ids[i]))
    assert by_id == await published(client, mq.stream)  # each ID is its own message's


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
    assert sorted(await published(client, mq.stream)) == list(range(TASKS * 10))


def test_threads_share_one_sync_publisher(redis_url: str, stream: str) -> None:
    start = threading.Barrier(THREADS)

    def publish_from_thread(publisher: Publisher, n: int) -> list[str]:
        start.wait(timeout=30)  # all threads publish at the same moment
        return [publisher.publish("job", Job(i=n * PER_THREAD + k)) for k in range(PER_THREAD)]

    with (
        Publisher(redis_url, stream=stream) as publisher,
        ThreadPoolExecutor(THREADS) as pool,
    ):
        futures = [pool.submit(publish_from_thread, publisher, n) for n in range(THREADS)]
        ids = [i for future in futures for i in future.result(timeout=60)]
    assert len(set(ids)) == THREADS * PER_THREAD
    with sync_client(redis_url, stream) as client:
        rows = client.xrange(stream)
    got = sorted(Job.model_validate_json(fields[b"data"]).i for _, fields in rows)
    assert got == list(range(THREADS * PER_THREAD))
