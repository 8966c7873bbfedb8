"""Jobs published from many tasks or threads at once, and reading them back: shared by
the tests of concurrent publishing (test_concurrency.py) and of coalesced writes
(test_coalesce.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import MessageQueue, Publisher, StreamId


class Job(BaseModel):
    i: int


def numbers(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> list[int]:
    """The ``i`` of every job among stream entries ``rows``, in their order."""
    return [Job.model_validate_json(fields[b"data"]).i for _, fields in rows]


async def jobs(client: aioredis.Redis, stream: str) -> list[int]:
    """The ``i`` of every entry of ``stream``, in stream order."""
    return numbers(await client.xrange(stream))


def publish_into(
    mq: MessageQueue, ids: dict[int, str]
) -> Callable[[int], Coroutine[Any, Any, None]]:
    """A task of one publish: ``publish(i)`` publishes ``Job(i)`` and keeps its ID in
    ``ids[i]``."""

    async def publish(i: int) -> None:
        ids[i] = await mq.publish("job", Job(i=i))

    return publish


async def publish_from_tasks(mq: MessageQueue, count: int) -> dict[int, str]:
    """``Job(i)`` for each ``i`` below ``count``, each published by its own task, all at
    once; returns the ID of each ``i``."""
    ids: dict[int, str] = {}
    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(publish_into(mq, ids), i)
    return ids


def in_id_order(ids: dict[int, str]) -> list[int]:
    """The ``i`` of ``ids`` ordered by their IDs: the stream's order if each ID is its own
    message's."""
    return sorted(ids, key=lambda i: StreamId.parse(ids[i]))


def publish_from_threads(publisher: Publisher, threads: int, each: int) -> list[str]:
    """``each`` jobs from each of ``threads`` threads, which all start at the same moment,
    through one ``publisher`` (thread ``n`` publishes ``Job(n * each + k)``); the IDs."""
    start = threading.Barrier(threads)

    def publish_from_thread(n: int) -> list[str]:
        start.wait(timeout=30)
        return [publisher.publish("job", Job(i=n * each + k)) for k in range(each)]

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(publish_from_thread, n) for n in range(threads)]
        return [i for future in futures for i in future.result(timeout=60)]


def sync_jobs(client: redis.Redis, stream: str) -> list[int]:
    """``jobs`` with a blocking client."""
    return numbers(client.xrange(stream))
