"""A consumer process of `make demo-cluster` (demos/cluster.py starts two of them).

Usage: python -m demos.cluster_worker URL TOPIC PARTITIONS CONSUMER LOGFILE

It handles the topic's ``order`` messages in the group ``billing`` and appends one line per
handled message to LOGFILE: ``<id> <customer> <seq> <delivery_count>``, written when the
handler starts, so the log is this process's handling order. SIGTERM drains it (exit 0).
"""

from __future__ import annotations

import sys
from typing import TextIO

import anyio
from pydantic import BaseModel

from demos._common import setup_logging
from streamq import Message, MessageQueue, StartFrom

GROUP = "billing"


class Order(BaseModel):
    customer: str
    seq: int  # the customer's own counter: 0, 1, 2, ... in publish order


def consumer(url: str, topic: str, partitions: int, name: str, log: TextIO) -> MessageQueue:
    mq = MessageQueue(
        url, stream=topic, group=GROUP, consumer=name, partitions=partitions,
        start=StartFrom.EARLIEST,
    )  # fmt: skip

    @mq.handler("order")
    async def order(msg: Message[Order]) -> None:
        log.write(f"{msg.id} {msg.data.customer} {msg.data.seq} {msg.delivery_count}\n")
        log.flush()

    return mq


async def consume(mq: MessageQueue) -> None:
    async with mq:
        await mq.run()  # SIGTERM/SIGINT: a graceful stop


def main(url: str, topic: str, partitions: str, name: str, path: str) -> None:
    setup_logging()
    with open(path, "a", encoding="utf-8") as log:
        anyio.run(consume, consumer(url, topic, int(partitions), name, log))


if __name__ == "__main__":
    main(*sys.argv[1:6])
