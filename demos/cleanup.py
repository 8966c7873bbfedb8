"""`make demo-cleanup`: cleanup removes only what every group acknowledged."""

from __future__ import annotations

from demos._common import fresh_stream, run, setup_logging, where
from streamq import CleanupPolicy, Message, MessageQueue, StartFrom


async def main() -> None:
    setup_logging()
    stream = fresh_stream("cleanup")
    policy = CleanupPolicy(max_stream_length=10, min_retention=0)
    mq = MessageQueue(stream=stream, group="fast", start=StartFrom.EARLIEST, cleanup=policy)
    print(f"cleanup demo on {where()}")
    handled = 0

    @mq.handler("n")
    async def handle(msg: Message[int]) -> None:
        nonlocal handled
        handled += 1
        if handled == 100:
            await mq.stop()

    async with mq:
        # 'slow' is another service (any language) that reads the same stream in its own group
        await mq.client.xgroup_create(stream, "slow", id="0")
        await mq.publish_many("n", list(range(100)))
        await mq.run(handle_signals=False)
        reply = await mq.client.xreadgroup("slow", "analytics-1", {stream: ">"}, count=40)
        await mq.client.xack(stream, "slow", *[entry_id for entry_id, _ in reply[0][1]])
        info = await mq.topic_info()
        for group in info.groups:
            print(
                f"  group {group.name!r}: last delivered {group.last_delivered_id}, lag {group.lag}"
            )
        print(
            f"length before cleanup: {info.length} (policy: keep at least {policy.max_stream_length})"
        )
        removed = await mq.cleanup()
        info = await mq.topic_info()
        print(f"cleanup removed {removed}: only the 40 both groups acknowledged")
        print(
            f"length after: {info.length}; 'slow' still has all {info.group('slow').lag} it has not read"
        )
        await mq.client.xack(
            stream,
            "slow",
            *[
                e
                for e, _ in (
                    await mq.client.xreadgroup("slow", "analytics-1", {stream: ">"}, count=100)
                )[0][1]
            ],
        )
        removed = await mq.cleanup()
        print(
            f"after 'slow' caught up: removed {removed} more, length {(await mq.topic_info()).length}"
        )
        await mq.terminate_topic()


if __name__ == "__main__":
    run(main)
