"""Registration on :class:`~streamq.MessageQueue`: each method delegates in one line to the
queue's :class:`~streamq._registration.Registry` (whose docstrings they carry)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

from ._facade_docs import adopt_docstrings
from ._registration import Registry
from .config import Duration
from .consume.middlewares import HandlerMiddleware
from .consume.routes import UNSET, Routes
from .flow.rate import RateLimit
from .flow.settings import FlowConfig
from .payload.versions import Upcast
from .publish.middlewares import PublishMiddleware
from .publish.periodic import Periodic

if TYPE_CHECKING:
    import streamq

F = TypeVar("F", bound=Callable[..., Any])


class RegistrationFacade:
    """The handlers, middlewares and periodic publishers registered on a queue."""

    _registry: Registry  # the part the queue holds

    @property
    def registry(self) -> Registry:
        """What is registered on this queue: its handlers, middlewares and periodic
        publishers (``App`` adds its middlewares outside the queue's own through it)."""
        return self._registry

    @property
    def route_table(self) -> Routes:
        """The handlers registered on this queue, by message type."""
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

    def include_router(self, router: streamq.Router) -> None:
        """Add the handlers and periodic publishers of ``router`` (a
        :class:`streamq.Router`), each handler wrapped by the router's middlewares; a type
        registered twice raises ConfigError naming both."""
        self._registry.include(router.routes(), router.periodics, router.rate_limits)

    def add_middleware(self, mw: HandlerMiddleware | PublishMiddleware) -> None:
        self._registry.add_middleware(mw)

    @property
    def flow_config(self) -> FlowConfig:
        """The rate limits of this queue's types (given to the queue and with its
        handlers), for the consumer engine; a snapshot."""
        return FlowConfig.of(self._registry.rate_limits)

    @property
    def rate_limits(self) -> Mapping[str, RateLimit]:
        """Message type -> its rate limit: those given to the queue (``rate_limits=``) and
        with its handlers (``rate=``)."""
        return self._registry.rate_limits

    @property
    def periodics(self) -> tuple[Periodic, ...]:
        """The periodic publishers registered on this queue."""
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


adopt_docstrings(RegistrationFacade, Registry)
