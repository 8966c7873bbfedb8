"""A consumer process of the ``cluster_consume`` figure (bench/cluster.py starts 1 or 2).

Usage: python -m bench.cluster_consumer URL TOPIC PARTITIONS NAME

It opens the partitioned topic (connection, cluster detection, group: not timed), prints
``ready``, waits for a line on stdin (the clock starts), then handles with a no-op handler
until SIGTERM and prints how many messages it handled.
"""

from __future__ import annotations

import sys

import anyio

from streamq import Message, MessageQueue, StartFrom

from .workload import Email


async def main(url: str, topic: str, partitions: int, name: str) -> None:
    mq = MessageQueue(
        url, stream=topic, group="bench", consumer=name, partitions=partitions,
        start=StartFrom.EARLIEST,
    )  # fmt: skip
    handled = 0

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        nonlocal handled
        handled += 1

    async with mq:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        await mq.run()  # SIGTERM: a graceful stop
    print(handled, flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
