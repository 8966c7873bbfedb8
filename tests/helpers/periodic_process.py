"""One process of a service with a periodic publisher: ``python -m tests.helpers.periodic_process
URL STREAM CONSUMER SECONDS [PARTITIONS] [hang]`` runs a consumer whose queue publishes a
``tick`` every 0.2 s, for SECONDS (or until SIGTERM), then stops (the periodic tests start
three). Claims hold a tick for 2 s unless renewed (5 s by default), so that a tick whose
claimer was killed is taken over soon.

``hang``: the first tick this process claims never reaches the server: its publish
middleware prints ``hanging <tick>`` and waits forever, after the claim and after the function
ran, right before the entry would be written (the test then kills the process).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from streamq import Message, MessageQueue, StartFrom
from streamq.publish import periodic_runner

periodic_runner.CLAIM_LEASE = 2.0


async def main(url: str, stream: str, consumer: str, seconds: float, partitions: int,
               hang: bool) -> None:  # fmt: skip
    mq = MessageQueue(
        url, stream=stream, group="g", consumer=consumer, start=StartFrom.EARLIEST,
        partitions=partitions,
    )  # fmt: skip

    @mq.periodic("tick", every=0.2)
    def tick() -> dict[str, str]:
        return {"from": consumer}

    @mq.handler("tick")
    async def handle(msg: Message[dict[str, str]]) -> None:
        pass

    async def hang_forever(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        print("hanging", meta["periodic_tick"], flush=True)
        await anyio.sleep_forever()

    if hang:
        mq.add_middleware(hang_forever)
    async with mq:
        with anyio.move_on_after(seconds):
            await mq.run()


if __name__ == "__main__":
    url, stream, consumer, seconds, *rest = sys.argv[1:]
    partitions = int(rest[0]) if rest else 1
    anyio.run(main, url, stream, consumer, float(seconds), partitions, "hang" in rest)
