"""A consumer in its own process, for tests that kill one while it moves scheduled
messages: ``python -m tests.helpers.mover_process URL STREAM CONSUMER`` runs until killed."""

from __future__ import annotations

import sys

import anyio

from streamq import Message, MessageQueue, StartFrom


async def main(url: str, stream: str, consumer: str) -> None:
    mq = MessageQueue(url, stream=stream, group="g", consumer=consumer, start=StartFrom.EARLIEST)

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        pass

    await mq.run(handle_signals=False)


if __name__ == "__main__":
    url, stream, consumer = sys.argv[1:4]
    anyio.run(main, url, stream, consumer)
