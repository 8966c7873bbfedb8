"""A consumer process for ``consume_2proc``: python -m bench.consumer_proc URL STREAM NAME.

Opens its queue and prints ``ready``; starts consuming at the line ``go`` on stdin and
stops at the next line (or the end of stdin); prints how many messages it handled.
"""

from __future__ import annotations

import functools
import sys

import anyio

from .workload import noop_consumer, queue, ready_then_go


async def main(url: str, stream: str, name: str) -> None:
    mq = queue(url, stream, consumer=name)
    handled = noop_consumer(mq)
    async with mq:
        await ready_then_go()  # "go"
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(mq.run, handle_signals=False))
            await anyio.to_thread.run_sync(sys.stdin.readline)  # "stop"
            await mq.stop()
    print(handled(), flush=True)


if __name__ == "__main__":
    url, stream, name = sys.argv[1:4]
    anyio.run(main, url, stream, name)
