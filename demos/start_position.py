"""`make demo-start-position`: LATEST, EARLIEST, StartFrom.at(id), and seek()."""

from __future__ import annotations

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from streamq import Message, MessageQueue, StartFrom


async def consume(
    stream: str, group: str, start: StartFrom, expect: int, seek: str | None = None
) -> list[int]:
    mq = MessageQueue(stream=stream, group=group, start=start)
    got: list[int] = []

    @mq.handler("n")
    async def handle(msg: Message[int]) -> None:
        got.append(msg.data)

    async with mq:
        if seek:
            await mq.seek(seek)
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            with anyio.move_on_after(1.0 if expect == 0 else 10):
                while len(got) < expect or expect == 0:
                    await anyio.sleep(0.05)
            await mq.stop()
    return got


async def main() -> None:
    setup_logging()
    stream = fresh_stream("start")
    print(f"start-position demo on {where()}")
    publisher = MessageQueue(stream=stream)
    ids = await publisher.publish_many("n", [1, 2, 3, 4, 5])
    print(f"history: 5 messages, ids {ids[0]} .. {ids[-1]}")
    print(
        f"  LATEST          -> {await consume(stream, 'latest', StartFrom.LATEST, 0)} (only what comes after the group exists)"
    )
    print(f"  EARLIEST        -> {await consume(stream, 'earliest', StartFrom.EARLIEST, 5)}")
    print(
        f"  at({ids[2]}) -> {await consume(stream, 'at', StartFrom.at(ids[2]), 2)} (entries after that ID)"
    )
    print(
        f"  LATEST + seek({ids[0]}) -> {await consume(stream, 'sought', StartFrom.LATEST, 4, seek=ids[0])}"
    )
    await publisher.terminate_topic()
    await publisher.aclose()


if __name__ == "__main__":
    run(main)
