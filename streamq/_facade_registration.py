"""Registration on :class:`~streamq.MessageQueue` and :class:`~streamq.Router`: each method
delegates in one line to their :class:`~streamq._registration.Registry` (whose docstrings
they carry). :class:`Registering` is what both offer; each adds its own middlewares."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Never, Protocol, TypeVar
from zoneinfo import ZoneInfo

from ._facade_docs import adopt_docstrings
from ._registration import Registry
from .config import Duration, refuse_unknown
from .consume.middlewares import HandlerMiddleware
from .consume.routes import UNSET, Route, Routes
from .flow.settings import FlowConfig
from .payload.versions import Upcast
from .publish.middlewares import PublishMiddleware
from .publish.periodic import Periodic

if TYPE_CHECKING:
    from .flow.rate import RateLimit

F = TypeVar("F", bound=Callable[..., Any])


class Includable(Protocol):
    """What ``include_router`` takes: a :class:`~streamq.Router`."""

    def routes(self) -> Iterable[Route]: ...

    @property
    def periodics(self) -> tuple[Periodic, ...]: ...

    @property
    def rate_limits(self) -> Mapping[str, RateLimit]: ...


class Registering:
    """Handlers (``@handler``, ``@batch_handler``, ``register(obj)``) and periodic
    publishers (``@periodic``) registered on a queue or a router."""

    _registry: Registry  # the part the queue or router holds

    @property
    def route_table(self) -> Routes:
        """The handlers registered here, by message type."""
        return self._registry.routes

    @property
    def rate_limits(self) -> Mapping[str, RateLimit]:
        """Message type -> its rate limit: those given with the handlers (``rate=``) and,
        on a queue, to the queue (``rate_limits=``)."""
        return self._registry.rate_limits

    @property
    def periodics(self) -> tuple[Periodic, ...]:
        """The periodic publishers registered here."""
        return self._registry.periodics

    def handler(
        self,
        message_type: str,
        *,
        model: Any = UNSET,
        version: int | None = None,
        upcast: Mapping[int, Upcast] | None = None,
        rate: RateLimit | None = None,
        **unknown: Never,  # a misspelt option: ConfigError naming the closest
    ) -> Callable[[F], F]:
        refuse_unknown(unknown, "handler()", Registering.handler)
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
        **unknown: Never,
    ) -> Callable[[F], F]:
        refuse_unknown(unknown, "batch_handler()", Registering.batch_handler)
        return self._registry.batch_handler(
            message_type, size, timeout, max_wait,
            model=model, version=version, upcast=upcast, rate=rate,
        )  # fmt: skip

    def register(self, handler: object) -> None:
        self._registry.register(handler, sys._getframe(1).f_locals)  # the caller's names

    def include_router(self, router: Includable) -> None:
        """Add the handlers and periodic publishers of ``router`` (a
        :class:`streamq.Router`), each handler wrapped by that router's middlewares (inside
        this one's); a type registered twice raises ConfigError naming both."""
        self._registry.include(router.routes(), router.periodics, router.rate_limits)

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
        **unknown: Never,
    ) -> Callable[[F], F]:
        refuse_unknown(unknown, "periodic()", Registering.periodic)
        return self._registry.periodic(
            message_type, every=every, cron=cron, catch_up=catch_up, name=name, key=key,
            meta=meta, timezone=timezone, priority=priority,
        )  # fmt: skip


class RegistrationFacade(Registering):
    """The handlers, middlewares and periodic publishers registered on a queue."""

    @property
    def registry(self) -> Registry:
        """What is registered on this queue: its handlers, middlewares and periodic
        publishers (``App`` adds its middlewares outside the queue's own through it)."""
        return self._registry

    def add_middleware(self, mw: HandlerMiddleware | PublishMiddleware) -> None:
        self._registry.add_middleware(mw)

    @property
    def flow_config(self) -> FlowConfig:
        """The rate limits of this queue's types (given to the queue and with its
        handlers), for the consumer engine; a snapshot."""
        return FlowConfig.of(self._registry.rate_limits)


adopt_docstrings(Registering, Registry)
adopt_docstrings(RegistrationFacade, Registry)
