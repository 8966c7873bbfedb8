"""Facts shared by the consumer's modules: task-local ones, and where entries come from."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

# True inside a consumer's worker and batch tasks: stop() called from a handler must not
# wait for the drain that includes that very handler.
inside_handler: ContextVar[bool] = ContextVar("streamq_inside_handler", default=False)

# What a fan-out subscriber's Message says of its group (it has none).
NO_GROUP = ""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a consumer's entries come from: its topic, and its partition (None: a plain
    stream, whose IDs are bare), and on a topic with priorities the stream's level."""

    topic: str
    partition: int | None = None  # the stream's index: IDs name it
    partitions: int = 1  # of the topic: a stream's partition is its index modulo this
    level: int | None = None  # a topic with priorities: the level (index // partitions)

    @property
    def id_prefix(self) -> str | None:
        """What the Message IDs of this stream start with (``"2:"``); None: bare IDs."""
        return None if self.partition is None else f"{self.partition}:"
