"""The benchmark workload: 100-byte JSON payloads of type ``email``; and what the figures
do alike around their timed part (queues, plain pipelines, consumer processes, cleanup)."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import Message, MessageQueue, StartFrom
from streamq.config import env_url
from streamq.message import encode_entry


class Email(BaseModel):
    to: str
    subject: str
    body: str
    t: float = 0.0


def payload(i: int, t: float = 0.0) -> Email:
    """About 100 bytes of JSON."""
    return Email(to=f"user{i:07d}@example.com", subject="Welcome aboard", body="x" * 24, t=t)


Fields = dict[bytes | str, bytes | str]


def entries(n: int) -> list[Fields]:
    """The fields of ``n`` entries of the workload, as a plain redis-py producer sends them."""
    return [encode_entry("email", payload(i)) for i in range(n)]


def xadd_pipeline(client: Any, stream: str, rows: list[Fields]) -> Any:
    """A pipeline (no transaction) of one XADD per row, to ``execute()`` (``await`` it on an
    asyncio client); for a redis-py client of either kind."""
    pipe = client.pipeline(transaction=False)
    for fields in rows:
        pipe.xadd(stream, fields)
    return pipe


async def prefill(url: str, stream: str, n: int) -> None:
    """``n`` entries of the workload, added with plain pipelined XADD (not timed)."""
    client = aioredis.Redis.from_url(url)
    fields = encode_entry("email", payload(0))
    for start in range(0, n, 2000):
        await xadd_pipeline(client, stream, [fields] * min(2000, n - start)).execute()
    await client.aclose()


async def discard(client: aioredis.Redis, stream: str) -> None:
    """Delete a figure's stream and close its plain client (after the clock stopped)."""
    await client.delete(stream)
    await client.aclose()


async def discard_queue(mq: MessageQueue) -> None:
    """Delete a figure's stream and close its queue (after the clock stopped)."""
    await mq.client.delete(mq.stream)
    await mq.aclose()


@contextmanager
def single_server() -> Iterator[str]:
    """The URL of the one-node server the figures run on: ``$STREAMQ_REDIS_URL``, else an
    embedded server started for the block (and closed after it)."""
    from streamq.server import EmbeddedServer  # not loaded in the RSS figure's consumer

    url = env_url()
    if url is not None:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


def figures_cli(description: str, figures: Callable[..., Any]) -> None:
    """``python -m bench.<module>``: run ``figures(url, quick, rounds, emit)`` alone on the
    one-node server, one JSON line per figure."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for smoke tests")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    def emit(**fields: Any) -> None:
        print(json.dumps(fields), flush=True)

    with single_server() as url:
        anyio.run(figures, url, args.quick, args.rounds, emit)


def fresh_stream(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def queue(
    url: str,
    stream: str,
    start: StartFrom = StartFrom.EARLIEST,
    consumer: str = "bench-1",
    **settings: object,
) -> MessageQueue:
    return MessageQueue(
        url, stream=stream, group="bench", consumer=consumer, start=start,
        **settings,  # type: ignore[arg-type]
    )  # fmt: skip


def noop_consumer(mq: MessageQueue, total: int | None = None) -> Callable[[], int]:
    """Register a no-op handler that stops the queue once ``total`` were handled (None:
    never); returns how many it has handled so far."""
    count = 0

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        nonlocal count
        count += 1
        if count == total:
            await mq.stop()

    return lambda: count


async def ready_then_go() -> None:
    """In a consumer process: tell the parent it is ready (a line ``ready`` on stdout),
    then wait for the word to go (a line on stdin)."""
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def drain_rate(
    url: str, name: str, n: int, cpu: list[float] | None = None, **settings: Any
) -> float:
    """Entries per second one consumer (a no-op handler, ``settings`` given to its queue)
    takes to drain ``n`` entries prefilled here, until its final ack flush. ``cpu``: gets
    the microseconds of CPU per entry both processes (this one and the server) spent."""
    stream = fresh_stream(name)
    await prefill(url, stream, n)
    mq = queue(url, stream, **settings)
    noop_consumer(mq, n)
    async with mq:
        server = await server_cpu(mq.client)
        t0, cpu0 = time.perf_counter(), time.process_time()
        await mq.run(handle_signals=False)  # returns after the final ack flush
        elapsed, used = time.perf_counter() - t0, time.process_time() - cpu0
        if cpu is not None:
            cpu.append((used + await server_cpu(mq.client) - server) / n * 1e6)
        assert (await mq.topic_info()).pending == 0, "bench consumer left entries pending"
        await mq.client.delete(stream)
    return n / elapsed


async def server_cpu(client: aioredis.Redis) -> float:
    """Seconds of CPU the server has spent (user and system), from ``INFO cpu``."""
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
