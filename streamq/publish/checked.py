"""What a queue does around each publish before it is sent: the model check of a type this
process handles, and the queue's publish middlewares (part of :class:`streamq.MessageQueue`).

A queue without handlers and without publish middlewares goes straight on to the send
(through the built-in trace context middleware alone when the ``[otel]`` extra is
installed: :func:`streamq.tracing.inject_trace_context`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .. import tracing
from ..config import Duration
from ..errors import ConfigError
from ..payload.versions import Versions
from .middlewares import Meta, PublishMiddleware, publish_chain
from .operations import Publishing
from .options import PublishOptions
from .periodic import Periodic
from .typed import TypedPublisher, check_model

if TYPE_CHECKING:
    from .plan import Key
    from .ticks import Published

M = TypeVar("M")
Send = Callable[[str, Any, Meta], Awaitable[str]]


class HandledModels(Protocol):
    """The models of the types this process handles (a queue's route table)."""

    def model_of(self, type_name: str) -> Any: ...


class CheckedPublishing:
    """``publish`` and ``publish_many`` of ``publishing`` with the model check of the types
    ``routes`` handle and the publish ``middlewares`` (the queue's, as registered: read at
    each publish);
    the typed publishers of the queue of ``stream``."""

    def __init__(
        self,
        publishing: Publishing,
        routes: HandledModels,
        middlewares: Sequence[PublishMiddleware],
        stream: str,
    ) -> None:
        self._publishing, self._routes, self._middlewares = publishing, routes, middlewares
        self._stream = stream
        self.typed_publishers: dict[str, Any] = {}  # type -> model, for the AsyncAPI document
        self.typed_versions: dict[str, int] = {}  # type -> the version its publisher writes

    async def publish(
        self, message_type: str, data: Any, meta: Mapping[str, str] | None, options: PublishOptions
    ) -> str:
        """Add one message (see :meth:`Publishing.publish`), after checking ``data``
        against the model of this process's handler of ``message_type``, if any, and
        through the queue's publish middlewares, if any."""
        send = partial(self._publishing.publish, options=options)  # no frame of its own
        return await self._checked(message_type, data, meta, send)

    async def publish_tick(
        self, periodic: Periodic, data: Any, tick_ms: int, partition: int
    ) -> Published:
        """Publish the data of a periodic tick as :meth:`publish` does (model check,
        middlewares), written with the tick's claim in one step (``add_tick``) in ``partition``. A
        middleware that does not pass it on publishes nothing (then the tick is skipped)."""
        # loaded on first use: only a queue with @mq.periodic publishes ticks
        from .periodic_runner import tick_time
        from .ticks import Published

        meta = {**periodic.meta, "periodic_tick": tick_time(tick_ms)}
        outcome = Published(None, added=False)

        async def send(message_type: str, data: Any, meta: Meta) -> str:
            nonlocal outcome
            fields = self._publishing.codec.entry(message_type, data, meta, periodic.key)
            outcome = await self._publishing.add_tick(periodic.name, partition, tick_ms, fields)
            return "" if outcome.entry_id is None else outcome.entry_id

        await self._checked(periodic.message_type, data, meta, send)
        return outcome

    async def _checked(
        self, message_type: str, data: Any, meta: Mapping[str, str] | None, send: Send
    ) -> str:
        """``send`` the message after the model check, through the publish middlewares."""
        model = self._routes.model_of(message_type)
        if model is not None:
            check_model(message_type, model, data)
        middlewares = self._middlewares
        if not middlewares:  # the usual case: no chain built
            if not tracing.AVAILABLE:
                return await send(message_type, data, meta)
            # the ID as send returned it: a ScheduledId stays one
            return await tracing.inject_trace_context(message_type, data, meta, send)  # type: ignore[no-any-return]
        if tracing.AVAILABLE:  # innermost: the context of the span active at the send
            middlewares = [*middlewares, tracing.inject_trace_context]
        return await publish_chain(middlewares, send)(message_type, data, meta)  # type: ignore[no-any-return]

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
        """Add many messages (see :meth:`Publishing.publish_many`), each checked as
        :meth:`publish` checks one. With publish middlewares, every message goes through
        them and is published on its own, in order (one write each, not a pipeline)."""
        items = list(items)
        model = self._routes.model_of(message_type)
        if model is not None:
            for item in items:
                check_model(message_type, model, item)
        if not self._middlewares:

            async def send(message_type: str, items: Any, meta: Meta) -> list[str]:
                return await self._publishing.publish_many(
                    message_type, items, meta, key=key, chunk=chunk, delay=delay, at=at,
                    priority=priority,
                )  # fmt: skip

            if not tracing.AVAILABLE:
                return await send(message_type, items, meta)
            # one call for all the items (one context): they stay pipelined
            return await tracing.inject_trace_context(message_type, items, meta, send)  # type: ignore[no-any-return]
        ids = []
        for item in items:
            one_key = key(item) if callable(key) else key
            ids.append(
                await self.publish(
                    message_type,
                    item,
                    meta,
                    PublishOptions(one_key, delay=delay, at=at, priority=priority),
                )
            )
        return ids

    def publisher(
        self, message_type: str, model: type[M], *, version: int | None = None
    ) -> TypedPublisher[M]:
        """A publisher of ``message_type`` messages whose data is a ``model``: mypy checks
        what is published, and data of another model raises MessageFormatError at once.
        The AsyncAPI document lists it as a send operation.

        ``version``: the schema version of ``model``, written in the ``ver`` field of every
        message of the type this queue publishes (by default the version of this
        process's handler of the type, else 1). Raises ConfigError for a version that is
        not a positive int, or another than an earlier publisher's of the type."""
        typed = TypedPublisher(message_type, model, publish=self.publish,
                               publish_many=self.publish_many, stream=self._stream)  # fmt: skip
        if version is not None:
            checked = Versions.checked(version, None, f"publisher of {message_type!r}").version
            known = self.typed_versions.setdefault(message_type, checked)
            if known != checked:
                raise ConfigError(
                    f"publisher of {message_type!r}: version={checked}, but another publisher "
                    f"of the type has version={known}: one queue writes one version of a type"
                )
        self.typed_publishers[message_type] = model
        return typed
