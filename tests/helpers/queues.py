"""A queue on any URL (a node of a cluster, a partitioned topic) with the suite's short
names and fast timings, the type of the ``make_queue`` fixture, and the handlers tests
share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamq import Message, MessageQueue, Reject, StartFrom
from streamq.testing import TEST_TIMINGS

# Timings small enough for tests, large enough for a loaded 2-core CI machine.
FAST = TEST_TIMINGS

QueueFactory = Callable[..., MessageQueue]


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


def handled_messages(mq: MessageQueue, message_type: str = "job") -> list[Message[Any]]:
    """Registers a ``message_type`` handler on ``mq`` that keeps every message it is given,
    in the list returned, in the order handled."""
    handled: list[Message[Any]] = []

    @mq.handler(message_type)
    async def keep(msg: Message[Any]) -> None:
        handled.append(msg)

    return handled
