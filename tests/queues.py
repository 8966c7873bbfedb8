"""A queue on any URL (a node of a cluster, a partitioned topic) with the suite's short
names and fast timings, and the handlers the feature tests of the cluster and of
partitioned topics share."""

from __future__ import annotations

from streamq import Message, MessageQueue, Reject, StartFrom
from streamq.testing import TEST_TIMINGS


def queue(url: str, stream: str, **options: object) -> MessageQueue:
    """A queue on ``stream``: group ``g``, consumer ``c1``, from the earliest entry, the
    test timings; ``options`` add to or replace these."""
    settings: dict[str, object] = {
        "stream": stream, "group": "g", "consumer": "c1", "start": StartFrom.EARLIEST,
        "config": TEST_TIMINGS, **options,
    }  # fmt: skip
    return MessageQueue(url, **settings)  # type: ignore[arg-type]


def ok_and_poison(mq: MessageQueue) -> list[str]:
    """Handlers on ``mq``: ``ok`` keeps the ID of each message it handles, in the list
    returned; ``poison`` rejects every message (dead-lettered at once)."""
    handled: list[str] = []

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        handled.append(msg.id)

    @mq.handler("poison")
    async def poison(msg: Message[int]) -> None:
        raise Reject("poison")

    return handled
