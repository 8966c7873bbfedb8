"""An ordered consumer process whose handler kills the process on a poison entry (as a
crash in native code would): each handled entry is logged in a Redis list as ``n``; the
process exits at once, acks unsent, when it meets ``{"poison": true}``.

Usage: python -m tests.helpers.poison_consumer URL STREAM CONSUMER LEASE MAX_DELIVERIES
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from streamq import Message, MessageQueue, RetryPolicy, StartFrom


def log_key(stream: str) -> str:
    return f"streamq:{{{stream}}}:test-handled"


async def main(url: str, stream: str, consumer: str, lease: str, max_deliveries: str) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05,
                        max_deliveries=int(max_deliveries))  # fmt: skip
    mq = MessageQueue(
        url, stream=stream, group="g", consumer=consumer, start=StartFrom.EARLIEST,
        ordered=True, ownership_lease=float(lease), block=0.2, retry=retry,
    )  # fmt: skip

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data.get("poison"):
            os._exit(9)
        await mq.client.rpush(log_key(stream), str(msg.data["n"]))

    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        print("ready", flush=True)


if __name__ == "__main__":
    url, stream, consumer, lease, max_deliveries = sys.argv[1:6]
    anyio.run(main, url, stream, consumer, lease, max_deliveries)
