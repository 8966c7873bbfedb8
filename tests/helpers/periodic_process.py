"""One process of a service with a periodic publisher: ``python -m tests.helpers.periodic_process
URL STREAM CONSUMER SECONDS`` runs a consumer whose queue publishes a ``tick`` every 0.2 s,
for SECONDS, then stops (the periodic tests start three)."""

from __future__ import annotations

import sys

import anyio

from streamq import Message, MessageQueue, StartFrom


async def main(url: str, stream: str, consumer: str, seconds: float) -> None:
    mq = MessageQueue(url, stream=stream, group="g", consumer=consumer, start=StartFrom.EARLIEST)

    @mq.periodic("tick", every=0.2)
    def tick() -> dict[str, str]:
        return {"from": consumer}

    @mq.handler("tick")
    async def handle(msg: Message[dict[str, str]]) -> None:
        pass

    async with mq:
        with anyio.move_on_after(seconds):
            await mq.run(handle_signals=False)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
