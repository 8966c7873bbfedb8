"""`make demo-stop-message`: stop one message ID for every consumer, then resume it."""

from __future__ import annotations

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from streamq import Message, MessageQueue, StartFrom


async def main() -> None:
    setup_logging()
    stream = fresh_stream("stop")
    print(f"stop/resume demo on {where()}")
    consumers = [MessageQueue(stream=stream, group=g, consumer="w1", start=StartFrom.EARLIEST,
                              claim_interval=0.2) for g in ("billing", "audit")]  # fmt: skip
    seen: dict[str, list[int]] = {"billing": [], "audit": []}
    for mq in consumers:

        def install(mq: MessageQueue) -> None:
            group = str(mq.group)  # each consumer here has its group

            @mq.handler("invoice")
            async def handle(msg: Message[int]) -> None:
                seen[group].append(msg.data)
                print(f"  {mq.group:<8} handled invoice {msg.data} ({msg.id})")

        install(mq)
    async with anyio.create_task_group() as tg:
        for mq in consumers:
            await mq.__aenter__()
        ids = await consumers[0].publish_many("invoice", [1, 2, 3])
        await consumers[0].stop_message(ids[1])
        print(f"stopped {ids[1]} (invoice 2) before anyone read it")
        for mq in consumers:
            tg.start_soon(mq.run)
        with anyio.fail_after(10):
            while any(len(v) < 2 for v in seen.values()):
                await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        print(f"stopped IDs: {(await consumers[0].topic_info()).stopped_ids}")
        await consumers[0].resume_message(ids[1])
        print(f"resumed {ids[1]}: each group handles it once, with its original ID")
        with anyio.fail_after(10):
            while any(len(v) < 3 for v in seen.values()):
                await anyio.sleep(0.05)
        for mq in consumers:
            await mq.stop()
    print(f"billing saw {seen['billing']}, audit saw {seen['audit']}")
    await consumers[0].terminate_topic()
    for mq in consumers:
        await mq.aclose()


if __name__ == "__main__":
    run(main)
