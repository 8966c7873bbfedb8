"""A consumer process killed by its own handler after it staged outputs (``msg.publish``)
and before the entry's ack: the entry whose data is 7 SIGKILLs the process from inside the
handler, once the entries before it had their outputs written with their acks.

Usage: python -m tests.helpers.outputs_consumer URL STREAM TARGET MODE PARTITIONS
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from streamq import Message, MessageQueue, StartFrom
from streamq.testing import TEST_TIMINGS

KILLER = 7


async def main(url: str, stream: str, target: str, mode: str, partitions: int) -> None:
    mq = MessageQueue(
        url, stream=stream, group="g", consumer="doomed", start=StartFrom.EARLIEST,
        config=TEST_TIMINGS, partitions=partitions, ordered=mode == "ordered",
        ownership_lease=2.0, concurrency=1,
    )  # fmt: skip
    done = 0

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        nonlocal done
        msg.publish("shipped", msg.data, stream=target)
        if msg.data == KILLER:
            await anyio.sleep(0.3)  # the acks of the entries before it are flushed
            os.kill(os.getpid(), signal.SIGKILL)
        done += 1

    async with mq:
        await mq.run()


if __name__ == "__main__":
    url, stream, target, mode, partitions = sys.argv[1:6]
    anyio.run(main, url, stream, target, mode, int(partitions))
