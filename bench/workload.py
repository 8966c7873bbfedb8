"""The benchmark workload: 100-byte JSON payloads of type ``email``."""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import Message, MessageQueue, StartFrom
from streamq.message import encode_entry


class Email(BaseModel):
    to: str
    subject: str
    body: str
    t: float = 0.0


def payload(i: int, t: float = 0.0) -> Email:
    """About 100 bytes of JSON."""
    return Email(to=f"user{i:07d}@example.com", subject="Welcome aboard", body="x" * 24, t=t)


async def prefill(url: str, stream: str, n: int) -> None:
    """``n`` entries of the workload, added with plain pipelined XADD (not timed)."""
    client = aioredis.Redis.from_url(url)
    fields = encode_entry("email", payload(0))
    for start in range(0, n, 2000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(2000, n - start)):
            pipe.xadd(stream, fields)
        await pipe.execute()
    await client.aclose()


def fresh_stream(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def queue(
    url: str, stream: str, start: StartFrom = StartFrom.EARLIEST, **settings: object
) -> MessageQueue:
    return MessageQueue(
        url, stream=stream, group="bench", consumer="bench-1", start=start,
        **settings,  # type: ignore[arg-type]
    )  # fmt: skip


def noop_consumer(mq: MessageQueue, total: int) -> None:
    """Register a no-op handler that stops the queue once ``total`` were handled."""
    count = 0

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        nonlocal count
        count += 1
        if count == total:
            await mq.stop()
