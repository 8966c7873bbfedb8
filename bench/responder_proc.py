"""The answering service of ``request_reply_2proc``: python -m bench.responder_proc URL STREAM.

Opens its queue with a ``quote`` handler that returns twice its number, prints ``ready``,
answers requests until a line on stdin (or its end), then prints how many it answered.
"""

from __future__ import annotations

import functools
import sys

import anyio

from streamq import Message

from .workload import queue


async def main(url: str, stream: str) -> None:
    mq = queue(url, stream, consumer="responder")
    answered = 0

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> int:
        nonlocal answered
        answered += 1
        return msg.data * 2

    async with mq, anyio.create_task_group() as tg:
        await tg.start(functools.partial(mq.run, handle_signals=False))
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # "stop"
        await mq.stop()
    print(answered, flush=True)


if __name__ == "__main__":
    url, stream = sys.argv[1:3]
    anyio.run(main, url, stream)
