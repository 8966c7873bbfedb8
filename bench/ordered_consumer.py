"""The ordered consumer process of ``rebalance_pause_ms`` for a death (bench/ordered.py
SIGKILLs it). Usage: python -m bench.ordered_consumer URL TOPIC NAME

It consumes the topic with the settings of bench/ordered.py (no-op handlers), prints
``ready`` once running, and runs until killed.
"""

from __future__ import annotations

import sys

import anyio

from streamq import Message

from .ordered import bench_queue


async def main(url: str, topic: str, name: str) -> None:
    mq = bench_queue(url, topic, name)

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        pass

    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        print("ready", flush=True)


if __name__ == "__main__":
    url, topic, name = sys.argv[1:4]
    anyio.run(main, url, topic, name)
