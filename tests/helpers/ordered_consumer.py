"""An ordered consumer process for the fault tests of ordered mode: each handler call is
logged in a Redis list as ``start|key|n|consumer|token|time`` (the wall time the call
began) and, once its work is done, ``done|key|n|consumer|token|time``, so the test can
check per key that no call skipped ahead, and when each call began.

Usage: python -m tests.helpers.ordered_consumer URL TOPIC PARTITIONS CONSUMER LEASE
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio

from streamq import Message, MessageQueue, StartFrom


def log_key(topic: str) -> str:
    return f"streamq:{{{topic}}}:test-calls"


async def main(url: str, topic: str, partitions: str, consumer: str, lease: str) -> None:
    mq = MessageQueue(
        url, stream=topic, group="g", consumer=consumer, start=StartFrom.EARLIEST,
        partitions=int(partitions), ordered=True, ownership_lease=float(lease), block=0.2,
        concurrency=4, grace=2.0,
    )  # fmt: skip

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        what = f"{msg.key}|{msg.data['n']}|{consumer}|{msg.fencing_token}|{time.time()}"
        await mq.client.rpush(log_key(topic), f"start|{what}")
        await anyio.sleep(0.003)  # some work
        await mq.client.rpush(log_key(topic), f"done|{what}")

    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        print("ready", flush=True)
    print(f"stopped: {mq.stop_reason}", flush=True)


if __name__ == "__main__":
    url, topic, partitions, consumer, lease = sys.argv[1:6]
    anyio.run(main, url, topic, partitions, consumer, lease)
