"""`make demo-auto-stop`: a consumer stops by itself when its group or stream disappears,
and `done` tells whether the stop was automatic or manual."""

from __future__ import annotations

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from streamq import Message, MessageQueue, StartFrom


async def run_and_report(mq: MessageQueue, act: str, action) -> None:  # type: ignore[no-untyped-def]
    @mq.handler("n")
    async def handle(msg: Message[int]) -> None:
        pass

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await anyio.sleep(0.3)
        print(f"  {act} ...")
        await action(mq)
        with anyio.fail_after(5):
            await mq.done.wait()  # what a supervisor would listen for
        kind = "automatic" if mq.auto_stopped else "manual"
        print(f"  done is set: {kind} stop, reason {mq.stop_reason!r}")


async def main() -> None:
    setup_logging()
    print(f"auto-stop demo on {where()}")

    async def destroy_group(mq: MessageQueue) -> None:
        # as someone else would, e.g. an operator's redis-cli (the raw client for the
        # stream's keys, on a cluster its slot's master)
        await mq.client.xgroup_destroy(mq.stream, mq.group)

    async def delete_stream(mq: MessageQueue) -> None:
        await mq.client.delete(mq.stream)

    async def terminate(mq: MessageQueue) -> None:
        await MessageQueue(mq.url, stream=mq.stream).terminate_topic()

    async def manual(mq: MessageQueue) -> None:
        await mq.stop()

    for act, action in [
        ("XGROUP DESTROY from another client", destroy_group),
        ("DEL of the stream from another client", delete_stream),
        ("terminate_topic() from another process", terminate),
        ("mq.stop()", manual),
    ]:
        mq = MessageQueue(stream=fresh_stream("auto"), group="demo", start=StartFrom.EARLIEST)
        await run_and_report(mq, act, action)


if __name__ == "__main__":
    run(main)
