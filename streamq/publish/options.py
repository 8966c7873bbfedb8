"""How one message is published: the options of ``MessageQueue.publish`` and of the blocking
``Publisher.publish`` in one value, which the parts between the façade and the write (the
model check and middlewares, the send, a typed publisher) pass on as they are."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from ..config import Duration
from ..errors import ConfigError
from .plan import Key


class PublishOptions(NamedTuple):
    """The options of one publish (see :meth:`streamq.MessageQueue.publish`)."""

    key: Key | None = None
    replicas: int = 0
    timeout: Duration = 1.0  # the server's WAIT timeout
    fsync: bool = False
    idempotency_key: str | None = None
    delay: Duration | None = None
    at: datetime | None = None
    schedule_id: str | None = None
    priority: int | None = None  # the level; None: the topic's default (the middle one)

    @property
    def scheduled(self) -> bool:
        """Whether the message is stored, to be added when due (``delay``, ``at`` or
        ``schedule_id`` given)."""
        return self.delay is not None or self.at is not None or self.schedule_id is not None

    def check_scheduled(self) -> None:
        """ConfigError naming the options a scheduled publish does not take, if given."""
        refused = {"replicas": self.replicas, "fsync": self.fsync,
                   "idempotency_key": self.idempotency_key}  # fmt: skip
        given = sorted(name for name, value in refused.items() if value)
        if given:
            raise ConfigError(
                f"{', '.join(given)} cannot be combined with delay=/at=/schedule_id=: a "
                "scheduled message is stored first, then added to the stream by a running "
                "consumer"
            )
