"""A topic terminated under its producer and re-created with another partition count:
shared by the tests of publishing (tests/publish) and of Spark's writes (tests/spark)."""

from __future__ import annotations

from streamq import MessageQueue
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect_sync


def lengths(url: str, streams: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Entries in each of ``streams`` (0 for a stream that does not exist)."""
    deployment = connect_sync(url)
    try:
        return {s: int(deployment.client_for(s).xlen(s)) for s in streams}
    finally:
        deployment.close()


def unread(url: str, topic: str, old: int, new: int) -> dict[str, int]:
    """Entries in streams of the ``old`` shape that the ``new`` one does not read."""
    read = set(partition_streams(topic, new))
    stale = [s for s in partition_streams(topic, old) if s not in read]
    return {s: n for s, n in lengths(url, stale).items() if n}


async def recreate(where: str, topic: str, old: int, new: int) -> MessageQueue:
    """Terminate ``topic`` (``old`` partitions), open it again with ``new`` (the caller
    closes the returned queue)."""
    async with MessageQueue(where, stream=topic, partitions=old, group="g") as first:
        await first.terminate_topic()
    again = MessageQueue(where, stream=topic, partitions=new, group="g")
    await again.open()
    return again
