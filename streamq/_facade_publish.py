"""Publishing on :class:`~streamq.MessageQueue`: each method delegates in one line to the
queue's :class:`~streamq.publish.checked.CheckedPublishing` (they carry the docstrings of its
:class:`~streamq.publish.operations.Publishing`, which document the options in full)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ._facade_docs import adopt_docstrings
from ._registration import Registry
from .config import Duration
from .publish.checked import CheckedPublishing
from .publish.operations import Publishing
from .publish.options import PublishOptions
from .publish.plan import Key
from .publish.typed import TypedPublisher
from .topic.handle import TopicHandle

if TYPE_CHECKING:
    from .publish.requests import Requests

M = TypeVar("M")


class PublishFacade:
    """``publish``, ``publish_many``, typed publishers and periodic publishers of a queue."""

    consumer: str
    _topic: TopicHandle  # the parts the queue holds
    _checked: CheckedPublishing
    _requests: Requests | None  # made by the first request
    _registry: Registry

    async def publish(
        self,
        message_type: str,
        data: Any,
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
        return await self._checked.publish(message_type, data, meta, PublishOptions(
            key, replicas, timeout, fsync, idempotency_key, delay, at, schedule_id, priority
        ))  # fmt: skip

    async def publish_many(
        self,
        message_type: str,
        items: Iterable[Any],
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | Callable[[Any], Key] | None = None,
        chunk: int = 1000,
        delay: Duration | None = None,
        at: datetime | None = None,
        priority: int | None = None,
    ) -> list[str]:
        return await self._checked.publish_many(
            message_type, items, meta, key=key, chunk=chunk, delay=delay, at=at,
            priority=priority,
        )  # fmt: skip

    async def request(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        *,
        timeout: Duration = 5.0,  # noqa: ASYNC109  # the request's own deadline
        reply_model: Any = None,
        key: Key | None = None,
        priority: int | None = None,
    ) -> Any:
        """Publish a request and return its reply: the return value of the handler that
        handles it (a consumer of this queue's group, in any process), validated as
        ``reply_model`` (plain JSON without one). ``key``, ``meta`` and ``priority``: as
        for :meth:`publish` (the request is published at that level; its reply is not
        queued behind anything).

        The reply is written with the request's ack; requests of one process share one
        reader of their replies. Raises RequestTimeout when no reply comes within
        ``timeout`` seconds (a consumer may still handle it later), and RemoteError with
        the reason when the handler failed past its delivery limit or rejected it, and
        MessageFormatError (the ValidationError its cause) when the reply does not fit
        ``reply_model``, and ConfigError for a ``priority`` that :meth:`publish` refuses.
        """
        if self._requests is None:  # loaded on first use: most queues never request
            from .publish.requests import Requests

            self._requests = Requests(
                lambda t, d, m, k, p: self._checked.publish(
                    t, d, m, PublishOptions(k, priority=p)
                ),
                self._topic.client_for, lambda: self._topic.streams, self._topic.codec.keyring,
            )  # fmt: skip
        return await self._requests.request(
            message_type, data, timeout=timeout, reply_model=reply_model, key=key, meta=meta,
            priority=priority,
        )  # fmt: skip

    def publisher(
        self, message_type: str, model: type[M], *, version: int | None = None
    ) -> TypedPublisher[M]:
        return self._checked.publisher(message_type, model, version=version)

    async def run_periodics(self) -> None:
        """Run this queue's periodic publishers (MessageQueue.run does, with the consumer)."""
        # loaded on first use: a queue without @mq.periodic never loads the tick machinery
        from .publish.periodic_runner import run_periodics

        await run_periodics(
            self._topic, self.consumer, self._registry.periodics, self._checked.publish_tick
        )


adopt_docstrings(PublishFacade, Publishing, CheckedPublishing)  # the options in full
