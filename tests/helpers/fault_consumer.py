"""A consumer process for the fault tests: records each handled ID in a Redis list.

Usage: python -m tests.helpers.fault_consumer URL STREAM CONSUMER
"""

from __future__ import annotations

import sys

import anyio

from streamq import Message, MessageQueue, StartFrom

MAX_IN_FLIGHT = 16


async def main(url: str, stream: str, consumer: str) -> None:
    mq = MessageQueue(
        url, stream=stream, group="g", consumer=consumer, start=StartFrom.EARLIEST,
        claim_idle=1.0, claim_interval=0.2, block=0.2, concurrency=8,
        max_in_flight=MAX_IN_FLIGHT, read_count=MAX_IN_FLIGHT,
    )  # fmt: skip

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        await anyio.sleep(0.002)  # some work
        await mq.client.rpush(f"handled:{stream}", msg.id)

    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)  # ready: a SIGTERM from now on is a graceful stop
        print("ready", flush=True)
    print(f"stopped: {mq.stop_reason}", flush=True)


if __name__ == "__main__":
    url, stream, consumer = sys.argv[1:4]
    anyio.run(main, url, stream, consumer)
