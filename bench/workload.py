"""The benchmark workload: 100-byte JSON payloads of type ``email``."""

from __future__ import annotations

import uuid

from pydantic import BaseModel

from streamq import Message, MessageQueue, StartFrom


class Email(BaseModel):
    to: str
    subject: str
    body: str
    t: float = 0.0


def payload(i: int, t: float = 0.0) -> Email:
    """About 100 bytes of JSON."""
    return Email(to=f"user{i:07d}@example.com", subject="Welcome aboard", body="x" * 24, t=t)


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
