"""How one message is published: ``MessageQueue.publish``'s options in one value, which the
parts between the façade and the write (the model check and middlewares, the send, a typed
publisher) pass on as they are."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from ..config import Duration
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
