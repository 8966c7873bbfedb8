"""A consumer process of the flow-control figures (bench/flow.py):
``python -m bench.flow_consumer URL STREAM NAME LIMIT``.

LIMIT is ``type`` (``RateLimit(500)`` on the type), ``key`` (``RateLimit(10, by="key")``)
or ``none`` (no limit; each handler awaits 5 ms, as one that calls a service). Opens its
queue and prints ``ready``; consumes from the line ``go`` on stdin until the next line;
then prints one JSON line: ``[[start, key], ...]``, the wall-clock time each handler call
started and its entry's publish key.
"""

from __future__ import annotations

import functools
import json
import sys
import time

import anyio

from streamq import Message, RateLimit

from .workload import Email, queue, ready_then_go

TYPE_LIMIT = RateLimit(500, per=1.0)
KEY_LIMIT = RateLimit(10, by="key")
SERVICE_CALL = 0.005  # seconds a handler of the pause figure awaits


async def main(url: str, stream: str, name: str, limit: str) -> None:
    rate = {"type": TYPE_LIMIT, "key": KEY_LIMIT, "none": None}[limit]
    mq = queue(url, stream, consumer=name)
    started: list[tuple[float, str | None]] = []

    @mq.handler("email", rate=rate)
    async def handle(msg: Message[Email]) -> None:
        started.append((time.time(), msg.key))
        if rate is None:
            await anyio.sleep(SERVICE_CALL)

    async with mq:
        await ready_then_go()  # "go"
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(mq.run, handle_signals=False))
            await anyio.to_thread.run_sync(sys.stdin.readline)  # "stop"
            await mq.stop()
    print(json.dumps(started), flush=True)


if __name__ == "__main__":
    url, stream, name, limit = sys.argv[1:5]
    anyio.run(main, url, stream, name, limit)
