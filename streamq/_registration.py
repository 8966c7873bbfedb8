"""Registering handlers on a queue or a :class:`streamq.Router`: the ``@mq.handler`` and
``@mq.batch_handler`` decorators, ``mq.register(obj)``, ``mq.include_router(router)`` and a
queue's middlewares, over a :class:`~streamq.consume.routes.Routes` (the route table).

Annotations are resolved with the local names of the frame that registers the handler
(a model defined inside a test or a factory function), or ``model=`` is given outright.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._decorators import refuse_bare
from .config import Duration, seconds
from .consume.middlewares import HandlerMiddleware, check_handler_middleware, takes_parameters
from .consume.routes import UNSET, BatchSettings, Routes
from .publish.middlewares import PublishMiddleware, check_publish_middleware
from .publish.periodic import add_periodic

if TYPE_CHECKING:
    import streamq

F = TypeVar("F", bound=Callable[..., Any])


class HandlerRegistry:
    """The registration methods of a queue whose routes live in ``route_table``."""

    route_table: Routes

    def handler(self, message_type: str, *, model: Any = UNSET) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` one by one.

        ``model``: what ``data`` is validated into; by default the handler's annotation
        ``Message[Model]``, resolved with the registering frame's local names too.
        """

        refuse_bare(self, "handler", message_type, '"email"')

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals
            self.route_table.add_single(message_type, func, model=model, namespace=namespace)
            return func

        return register

    def batch_handler(
        self,
        message_type: str,
        size: int | None = None,
        timeout: Duration | None = None,
        max_wait: Duration | None = None,
        *,
        model: Any = UNSET,
    ) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` in lists (see BatchConfig);
        ``model`` as for :meth:`handler`."""
        refuse_bare(self, "batch_handler", message_type, '"email"')
        settings = BatchSettings(
            size=size,
            timeout=None if timeout is None else seconds(timeout, "timeout", allow_zero=False),
            max_wait=None if max_wait is None else seconds(max_wait, "max_wait"),
        )

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals
            self.route_table.add_batch(
                message_type, func, settings, model=model, namespace=namespace
            )
            return func

        return register

    def register(self, handler: object) -> None:
        """Register a handler object (``message_type`` + ``handle``/``handle_batch``)."""
        self.route_table.add_object(handler, namespace=sys._getframe(1).f_locals)

    def include_router(self, router: streamq.Router) -> None:
        """Add the handlers of ``router`` (a :class:`streamq.Router`), each wrapped by the
        router's middlewares; a type registered twice raises ConfigError naming both."""
        for route in router.routes():
            self.route_table.adopt(route)
        for periodic in router.periodics:
            add_periodic(self, periodic)


class QueueRegistry(HandlerRegistry):
    """A queue's registrations: handlers, routers, and the middlewares of the queue."""

    _handler_middlewares: list[HandlerMiddleware]
    _publish_middlewares: list[PublishMiddleware]

    def add_middleware(self, mw: HandlerMiddleware | PublishMiddleware) -> None:
        """Wrap every handler call, or every publish, of this queue with ``mw``.

        ``async def mw(msg, call_next)`` wraps handler calls (a batch handler's call gets
        the list); ``async def mw(message_type, data, meta, call_next)`` wraps publishing.
        Outer first, in the order added; whatever a handler middleware raises is the
        entry's failure (retried, dead-lettered). Raises ConfigError for anything else.
        """
        if takes_parameters(mw, 4):
            self._publish_middlewares.append(check_publish_middleware(mw))
        else:
            self._handler_middlewares.append(check_handler_middleware(mw))
