"""A consumer process of the ``cluster_consume`` figure (bench/cluster.py starts 1 or 2).

Usage: python -m bench.cluster_consumer URL TOPIC PARTITIONS NAME

It opens the partitioned topic (connection, cluster detection, group: not timed), prints
``ready``, waits for a line on stdin (the clock starts), then handles with a no-op handler
until SIGTERM and prints how many messages it handled.
"""

from __future__ import annotations

import sys

import anyio

from .workload import noop_consumer, queue, ready_then_go


async def main(url: str, topic: str, partitions: int, name: str) -> None:
    mq = queue(url, topic, consumer=name, partitions=partitions)
    handled = noop_consumer(mq)
    async with mq:
        await ready_then_go()
        await mq.run()  # SIGTERM: a graceful stop
    print(handled(), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
