"""Publishing figures and their plain redis-py yardsticks (same payloads, same server).

* ``raw_xadd_single`` / ``publish_single``: one XADD awaited at a time.
* ``raw_xadd_concurrent`` / ``publish_concurrent``: ``TASKS`` tasks publishing at once on
  one client (plain redis-py: a blocking pool of ``MAX_CONNECTIONS``, streamq's own size;
  its default pool refuses a 101st connection).
* ``raw_xadd_threads`` / ``publish_threads``: ``THREADS`` threads sharing one client.
* ``publish_durable``: ``publish(..., replicas=1)`` on an embedded cluster of one master and
  one replica, next to plain publishing on the same cluster.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis

from streamq import EmbeddedCluster, Publisher
from streamq.wire.pool_options import MAX_CONNECTIONS

from .workload import discard, discard_queue, fresh_stream, payload, queue

TASKS = 200
THREADS = 32


def plain_fields(i: int) -> dict[str, str]:
    """What a plain redis-py producer sends: the same JSON, serialised by pydantic."""
    return {"type": "email", "data": payload(i).model_dump_json()}


def plain_client(url: str) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS)
    return aioredis.Redis(connection_pool=pool)


async def raw_xadd_single(url: str, n: int) -> float:
    stream, client = fresh_stream("rawpub1"), plain_client(url)
    t0 = time.perf_counter()
    for i in range(n):
        await client.xadd(stream, plain_fields(i))
    elapsed = time.perf_counter() - t0
    await discard(client, stream)
    return n / elapsed


async def publish_single(url: str, n: int) -> float:
    mq = queue(url, fresh_stream("pub1"))
    t0 = time.perf_counter()
    for i in range(n):
        await mq.publish("email", payload(i))
    elapsed = time.perf_counter() - t0
    await discard_queue(mq)
    return n / elapsed


async def concurrently(n: int, publish: Any) -> float:
    """``TASKS`` tasks call ``publish(i)`` for ``n`` values of ``i`` in all; the rate."""
    per_task = n // TASKS

    async def task(k: int) -> None:
        for i in range(k * per_task, (k + 1) * per_task):
            await publish(i)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for k in range(TASKS):
            tg.start_soon(task, k)
    return per_task * TASKS / (time.perf_counter() - t0)


async def raw_xadd_concurrent(url: str, n: int) -> float:
    stream, client = fresh_stream("rawpubc"), plain_client(url)

    async def publish(i: int) -> None:
        await client.xadd(stream, plain_fields(i))

    rate = await concurrently(n, publish)
    await discard(client, stream)
    return rate


async def publish_concurrent(url: str, n: int) -> float:
    mq = queue(url, fresh_stream("pubc"))

    async def publish(i: int) -> None:
        await mq.publish("email", payload(i))

    rate = await concurrently(n, publish)
    await discard_queue(mq)
    return rate


def from_threads(n: int, publish: Any) -> float:
    """``THREADS`` threads call ``publish(i)`` for ``n`` values of ``i`` in all; the rate."""
    per_thread = n // THREADS

    def work(k: int) -> None:
        for i in range(k * per_thread, (k + 1) * per_thread):
            publish(i)

    with ThreadPoolExecutor(THREADS) as pool:
        t0 = time.perf_counter()
        list(pool.map(work, range(THREADS)))
        return per_thread * THREADS / (time.perf_counter() - t0)


def raw_xadd_threads(url: str, n: int) -> float:
    stream = fresh_stream("rawpubt")
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS)
    with redis.Redis(connection_pool=pool) as client:
        rate = from_threads(n, lambda i: client.xadd(stream, plain_fields(i)))
        client.delete(stream)
    return rate


def publish_threads(url: str, n: int) -> float:
    stream = fresh_stream("pubt")
    with Publisher(url, stream=stream) as publisher:
        rate = from_threads(n, lambda i: publisher.publish("email", payload(i)))
    with redis.Redis.from_url(url) as client:
        client.delete(stream)
    return rate


async def durable_pair(n: int, rounds: int = 3) -> tuple[list[float], list[float]]:
    """(durable rates with one replica, plain rates), ``rounds`` of each taken in turn on
    one cluster of one master and one replica, after a warm-up publish of each (the
    figure is short: taken in turn, load swings hit both alike)."""
    with EmbeddedCluster(masters=1, replicas=1) as cluster:
        rates: dict[int, list[float]] = {1: [], 0: []}
        for _ in range(rounds):
            for replicas in (1, 0):
                mq = queue(cluster.url, fresh_stream("durable"))
                await mq.publish("email", payload(0), replicas=replicas, timeout=1.0)
                t0 = time.perf_counter()
                for i in range(n):
                    await mq.publish("email", payload(i), replicas=replicas, timeout=1.0)
                rates[replicas].append(n / (time.perf_counter() - t0))
                await discard_queue(mq)
    return rates[1], rates[0]
