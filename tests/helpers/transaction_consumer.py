"""A consumer process killed by its own handler after its transaction staged commands
(``msg.transaction()``) and before the entry's ack: the entry whose data is 7 SIGKILLs the
process from inside the handler, once the entries before it were acked with their commands.

Usage: python -m tests.helpers.transaction_consumer URL STREAM MODE PARTITIONS
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from streamq import Message, MessageQueue, StartFrom
from streamq.testing import TEST_TIMINGS

KILLER = 7


async def main(url: str, stream: str, mode: str, partitions: int) -> None:
    mq = MessageQueue(
        url, stream=stream, group="g", consumer="doomed", start=StartFrom.EARLIEST,
        config=TEST_TIMINGS, partitions=partitions, ordered=mode == "ordered",
        ownership_lease=2.0, concurrency=1,
    )  # fmt: skip

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
        if msg.data == KILLER:
            await anyio.sleep(0.3)  # the acks of the entries before it are flushed
            os.kill(os.getpid(), signal.SIGKILL)

    async with mq:
        await mq.run()


if __name__ == "__main__":
    url, stream, mode, partitions = sys.argv[1:5]
    anyio.run(main, url, stream, mode, int(partitions))
