"""Typed publishers and the model check of ``publish``.

``emails = mq.publisher("email", Email)`` gives a :class:`TypedPublisher`: mypy rejects
``emails.publish(Click(...))``, and at run time data of another model raises
:class:`~streamq.MessageFormatError` when it is published, not later at a consumer.

``mq.publish(type, data)`` of a type this process has a handler for checks ``data``
against that handler's model the same way (:func:`check_model`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..config import Duration
from ..errors import MessageFormatError
from ..message import validate_type_name
from .options import PublishOptions

if TYPE_CHECKING:
    from .plan import Key

M = TypeVar("M")
# a queue's ``publish`` (its options in one value) and ``publish_many``
PublishCall = Callable[[str, Any, Mapping[str, str] | None, PublishOptions], Awaitable[str]]
PublishManyCall = Callable[..., Awaitable[list[str]]]


class TypedPublisher(Generic[M]):
    """Publishes messages of one type, whose data is one model (``mq.publisher``), with
    the ``publish`` and ``publish_many`` of the queue of ``stream``."""

    def __init__(
        self,
        message_type: str,
        model: type[M],
        *,
        publish: PublishCall,
        publish_many: PublishManyCall,
        stream: str,
    ) -> None:
        validate_type_name(message_type)
        self.message_type, self.model, self.stream = message_type, model, stream
        self._publish, self._publish_many = publish, publish_many

    async def publish(
        self,
        data: M,
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | None = None,
        replicas: int = 0,
        timeout: Duration = 1.0,  # noqa: ASYNC109  # the server's WAIT timeout
        fsync: bool = False,
        idempotency_key: str | None = None,
        delay: Duration | None = None,
        at: datetime | None = None,
        schedule_id: str | None = None,
        priority: int | None = None,
    ) -> str:
        """Publish ``data`` (an instance of the model), now or later (``delay``, ``at``,
        ``schedule_id``: a :class:`~streamq.ScheduledId` is returned); the options are
        those of :meth:`streamq.MessageQueue.publish`. Raises MessageFormatError for
        another model."""
        check_instance(self.message_type, self.model, data)
        return await self._publish(self.message_type, data, meta, PublishOptions(
            key, replicas, timeout, fsync, idempotency_key, delay, at, schedule_id, priority
        ))  # fmt: skip

    async def publish_many(
        self,
        items: Iterable[M],
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | Callable[[M], Key] | None = None,
        chunk: int = 1000,
        delay: Duration | None = None,
        at: datetime | None = None,
        priority: int | None = None,
    ) -> list[str]:
        """Publish many instances of the model with pipelined writes, now or later (see
        :meth:`streamq.MessageQueue.publish_many`); nothing is sent if one is of another model."""
        items = list(items)
        for item in items:
            check_instance(self.message_type, self.model, item)
        return await self._publish_many(
            self.message_type, items, meta, key=key, chunk=chunk, delay=delay, at=at,
            priority=priority,
        )  # fmt: skip

    def __repr__(self) -> str:
        name = getattr(self.model, "__name__", repr(self.model))
        return f"TypedPublisher({self.message_type!r}, {name}, stream={self.stream!r})"


def check_instance(message_type: str, model: Any, data: Any) -> None:
    """MessageFormatError unless ``data`` is a ``model`` (validated, for non-class models)."""
    if isinstance(model, type):
        if not isinstance(data, model):
            raise MessageFormatError(_wrong_model(message_type, model, data))
        return
    try:
        TypeAdapter(model).validate_python(data)
    except ValidationError as e:
        raise MessageFormatError(f"{message_type!r} data does not fit {model!r}: {e}") from None


def check_model(message_type: str, model: Any, data: Any) -> None:
    """The check ``publish`` makes for a type this process handles with ``model``: an
    instance of another pydantic model is refused (its consumer would refuse it later).
    Other data (a dict, JSON values) is validated by the consumer, as from any producer."""
    if isinstance(data, BaseModel) and isinstance(model, type) and not isinstance(data, model):
        raise MessageFormatError(_wrong_model(message_type, model, data))


def _wrong_model(message_type: str, model: type, data: Any) -> str:
    return (
        f"{message_type!r} messages carry {model.__name__}, got {type(data).__name__}: "
        "publish an instance of the model (a consumer would refuse this data)"
    )
