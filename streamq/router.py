"""``streamq.Router``: handlers and middlewares defined in their own module, added to a
queue with ``mq.include_router(router)`` (or ``App(queue, routers=[...])``).

A service splits its handlers over modules the way a web app splits its routes::

    # emails.py
    router = Router()

    @router.handler("signup")
    async def welcome(msg: Message[Signup]) -> None: ...

    # service.py
    mq = MessageQueue(stream="users", group="mailer")
    mq.include_router(emails.router)

The handlers stay plain functions, so a test calls ``welcome(...)`` directly or includes
the router into a queue of its own. A type registered twice (in two routers, or in a router
and on the queue) is a :class:`~streamq.ConfigError` naming both places.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from ._facade_docs import adopt_docstrings
from ._registration import Registry
from .config import Duration
from .consume.middlewares import HandlerMiddleware
from .consume.routes import UNSET, Route, Routes
from .flow.rate import RateLimit
from .payload.versions import Upcast
from .publish.periodic import Periodic

F = TypeVar("F", bound=Callable[..., Any])


class Router:
    """Handlers (``@router.handler``, ``@router.batch_handler``, ``router.register(obj)``),
    periodic publishers (``@router.periodic``) and the middlewares that wrap the handlers,
    to include into a queue.

    Parameters:
        middlewares: ``async def mw(msg, call_next)`` functions around every handler call
            of this router, outer first; they run inside the queue's and the App's.

    Raises ConfigError (HandlerError) for an unusable handler or a type registered twice.
    """

    def __init__(self, *, middlewares: Sequence[HandlerMiddleware] = ()) -> None:
        self._registry = Registry("router")
        for mw in middlewares:
            self._registry.add_handler_middleware(mw)

    @property
    def route_table(self) -> Routes:
        """The handlers registered on this router, by message type."""
        return self._registry.routes

    def handler(
        self,
        message_type: str,
        *,
        model: Any = UNSET,
        version: int | None = None,
        upcast: Mapping[int, Upcast] | None = None,
        rate: RateLimit | None = None,
    ) -> Callable[[F], F]:
        return self._registry.handler(
            message_type, model=model, version=version, upcast=upcast, rate=rate
        )

    def batch_handler(
        self,
        message_type: str,
        size: int | None = None,
        timeout: Duration | None = None,
        max_wait: Duration | None = None,
        *,
        model: Any = UNSET,
        version: int | None = None,
        upcast: Mapping[int, Upcast] | None = None,
        rate: RateLimit | None = None,
    ) -> Callable[[F], F]:
        return self._registry.batch_handler(
            message_type,
            size,
            timeout,
            max_wait,
            model=model,
            version=version,
            upcast=upcast,
            rate=rate,
        )

    def register(self, handler: object) -> None:
        self._registry.register(handler, sys._getframe(1).f_locals)  # the caller's names

    def include_router(self, router: Router) -> None:
        """Add the handlers and periodic publishers of ``router``, each handler wrapped by
        that router's middlewares (inside this one's); a type registered twice raises
        ConfigError naming both."""
        self._registry.include(router.routes(), router.periodics, router.rate_limits)

    def add_middleware(self, mw: HandlerMiddleware) -> None:
        """Wrap every handler call of this router with ``mw`` (inside those added before)."""
        self._registry.add_handler_middleware(mw)

    def routes(self) -> Iterable[Route]:
        """The routes to include, each carrying this router's middlewares."""
        return self._registry.routes_to_include()

    @property
    def message_types(self) -> tuple[str, ...]:
        """The message types this router handles."""
        return tuple(self._registry.routes.routes)

    @property
    def rate_limits(self) -> Mapping[str, RateLimit]:
        """Message type -> its rate limit, for the types given one (with their handler)."""
        return self._registry.rate_limits

    @property
    def periodics(self) -> tuple[Periodic, ...]:
        """The periodic publishers registered on this router."""
        return self._registry.periodics

    def periodic(
        self,
        message_type: str,
        *,
        every: float | timedelta | None = None,
        cron: str | None = None,
        catch_up: bool = False,
        name: str | None = None,
        key: str | None = None,
        meta: Mapping[str, str] | None = None,
        timezone: str | ZoneInfo | None = None,
        priority: int | None = None,
    ) -> Callable[[F], F]:
        return self._registry.periodic(
            message_type, every=every, cron=cron, catch_up=catch_up, name=name, key=key,
            meta=meta, timezone=timezone, priority=priority,
        )  # fmt: skip


adopt_docstrings(Router, Registry)
