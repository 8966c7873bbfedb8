"""What is registered on a queue or a :class:`streamq.Router`: its route table (the
handlers), its middlewares and its periodic publishers, in one part, :class:`Registry`,
that both hold and delegate to.

Annotations are resolved with the local names of the frame that registers the handler
(a model defined inside a test or a factory function), or ``model=`` is given outright.
A decorator reads the frame it is applied in; :meth:`Registry.register` takes the
namespace from its caller (the façade passes its own caller's).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from zoneinfo import ZoneInfo

from ._decorators import refuse_bare
from ._payload_routes import with_versions
from .config import Duration, seconds
from .consume.middlewares import HandlerMiddleware, check_handler_middleware, takes_parameters
from .consume.routes import UNSET, BatchSettings, Namespace, Route, Routes
from .errors import ConfigError
from .flow.settings import add_rate, checked_rate
from .payload.versions import Upcast, Versions
from .publish.middlewares import PublishMiddleware, check_publish_middleware
from .publish.periodic import Periodic, make_periodic

if TYPE_CHECKING:
    from .flow.rate import RateLimit

F = TypeVar("F", bound=Callable[..., Any])
Owner = Literal["mq", "router"]  # how messages name what the decorators are written on


class Registry:
    """The handlers, middlewares and periodic publishers of a queue or a Router.

    ``owner``: ``"mq"`` or ``"router"``, as a refused decorator is written there.
    ``rate_limits``: the rate limits of types given to the queue itself (checked), beside
    which those given with handlers are kept.
    """

    def __init__(self, owner: Owner, rate_limits: Mapping[str, RateLimit] | None = None) -> None:
        self.routes = Routes()
        self._owner = owner
        self._rates: dict[str, RateLimit] = dict(rate_limits or {})
        self._handler_middlewares: list[HandlerMiddleware] = []
        self._publish_middlewares: list[PublishMiddleware] = []
        self._periodics: list[Periodic] = []
        self._versions: dict[str, Versions] = {}  # the types given a version= or upcast=

    # -- handlers -------------------------------------------------------------------
    def handler(
        self,
        message_type: str,
        *,
        model: Any = UNSET,
        version: int | None = None,
        upcast: Mapping[int, Upcast] | None = None,
        rate: RateLimit | None = None,
    ) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` one by one.

        ``model``: what ``data`` is validated into; by default the handler's annotation
        ``Message[Model]``, resolved with the registering frame's local names too.
        ``version``: the schema version of the model (1 by default), written in the ``ver``
        field of what this queue publishes of the type; ``upcast``: ``{k: f}`` where
        ``f`` turns the decoded JSON of a version-k ``data`` into version k + 1's, for
        every k from the oldest version still taken to ``version - 1``
        (docs/guides/payloads.md). Raises ConfigError for a version or upcast that
        cannot be, or a type given two versions.
        ``rate``: a :class:`~streamq.RateLimit` on the type, shared by every consumer of
        the group (ConfigError if the type has another one already).
        """
        refuse_bare(self._owner, "handler", message_type, '"email"')
        versions = self._checked_versions(message_type, version, upcast)
        limit = checked_rate(rate, "handler rate")

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals  # where the decorator is applied
            self._check_rate(message_type, limit)
            self.routes.add_single(message_type, func, model=model, namespace=namespace)
            self._apply_versions(message_type, versions)
            self._add_rate(message_type, limit)
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
        version: int | None = None,
        upcast: Mapping[int, Upcast] | None = None,
        rate: RateLimit | None = None,
    ) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` in lists (see BatchConfig);
        ``model``, ``version``, ``upcast`` and ``rate`` as for :meth:`handler` (a batch
        takes a permit per entry)."""
        refuse_bare(self._owner, "batch_handler", message_type, '"email"')
        versions = self._checked_versions(message_type, version, upcast)
        limit = checked_rate(rate, "batch_handler rate")
        settings = BatchSettings(
            size=size,
            timeout=None if timeout is None else seconds(timeout, "timeout", allow_zero=False),
            max_wait=None if max_wait is None else seconds(max_wait, "max_wait"),
        )

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals  # where the decorator is applied
            self._check_rate(message_type, limit)
            self.routes.add_batch(message_type, func, settings, model=model, namespace=namespace)
            self._apply_versions(message_type, versions)
            self._add_rate(message_type, limit)
            return func

        return register

    def register(self, handler: object, namespace: Namespace | None = None) -> None:
        """Register a handler object (``message_type`` + ``handle``/``handle_batch``)."""
        self.routes.add_object(handler, namespace=namespace)
        message_type = getattr(handler, "message_type", "")
        self._apply_versions(message_type, self._versions.get(message_type))

    def include(
        self,
        routes: Iterable[Route],
        periodics: Iterable[Periodic],
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> None:
        """Add the handlers, periodic publishers and rate limits of a router
        (``router.routes()``, ``router.periodics``, ``router.rate_limits``); a type
        registered twice, or given two rate limits, raises ConfigError naming both."""
        rates = dict(rate_limits or {})
        for type_name, rate in rates.items():
            self._check_rate(type_name, rate)
        for route in routes:
            self.routes.adopt(route)
        for type_name, rate in rates.items():
            self._add_rate(type_name, rate)
        for periodic in periodics:
            self.add_periodic(periodic)

    # -- rate limits ----------------------------------------------------------------
    @property
    def rate_limits(self) -> Mapping[str, RateLimit]:
        """Message type -> its rate limit: given to the queue, or with a handler."""
        return MappingProxyType(self._rates)

    def _check_rate(self, type_name: str, rate: RateLimit | None) -> None:
        """ConfigError before anything is registered if ``type_name`` has another limit."""
        if rate is not None:
            add_rate(dict(self._rates), type_name, rate, "the second given with a handler")

    def _add_rate(self, type_name: str, rate: RateLimit | None) -> None:
        if rate is not None:
            self._rates[type_name] = rate

    def routes_to_include(self) -> Iterable[Route]:
        """The routes, each wrapped by this registry's handler middlewares (outside its
        own): what including them into a queue adds."""
        outer = tuple(self._handler_middlewares)
        return [_with_outer(route, outer) for route in self.routes.routes.values()]

    def _checked_versions(
        self, message_type: str, version: object, upcast: object
    ) -> Versions | None:
        """The versions given to a handler of ``message_type`` (None: none given), checked;
        ConfigError if the type has other versions already."""
        if version is None and upcast is None:
            return None
        where = f"handler of {message_type!r}"
        if version is None and isinstance(upcast, Mapping) and upcast:
            raise ConfigError(f"{where}: {_upcast_without_version(upcast)}")
        versions = Versions.checked(1 if version is None else version, upcast, where)
        known = self._versions.get(message_type)
        if known is not None and known != versions:
            raise ConfigError(
                f"{where}: version={versions.version} with upcasts from "
                f"{sorted(versions.upcast)}, but another handler of the type has "
                f"version={known.version} with upcasts from {sorted(known.upcast)}: "
                "give both the same version= and upcast="
            )
        return versions

    def _apply_versions(self, message_type: str, versions: Versions | None) -> None:
        """Give the type's route its versions (again: a later registration of the type
        may have made its parser anew)."""
        versions = versions or self._versions.get(message_type)
        route = self.routes.routes.get(message_type)
        if versions is None or route is None:
            return
        self._versions[message_type] = versions
        with_versions(route, versions)

    # -- middlewares ----------------------------------------------------------------
    @property
    def handler_middlewares(self) -> Sequence[HandlerMiddleware]:
        """The handler middlewares, outer first."""
        return self._handler_middlewares

    @property
    def publish_middlewares(self) -> Sequence[PublishMiddleware]:
        """The publish middlewares, outer first (the list itself: added ones show)."""
        return self._publish_middlewares

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

    def add_handler_middleware(self, mw: HandlerMiddleware) -> None:
        """Wrap every handler call with ``mw`` (inside those added before)."""
        self._handler_middlewares.append(check_handler_middleware(mw))

    def add_outermost(self, middlewares: Sequence[HandlerMiddleware | PublishMiddleware]) -> None:
        """Make ``middlewares`` (handler or publish ones, as :meth:`add_middleware` takes)
        the outermost, in their order; nothing is added if one is refused."""
        outer = Registry(self._owner)
        for mw in middlewares:
            outer.add_middleware(mw)
        self._handler_middlewares[:0] = outer.handler_middlewares  # in place: it is shared
        self._publish_middlewares[:0] = outer.publish_middlewares

    # -- periodic publishers --------------------------------------------------------
    @property
    def periodics(self) -> tuple[Periodic, ...]:
        """The periodic publishers registered here."""
        return tuple(self._periodics)

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
        """Publish what the decorated function returns as a ``message_type`` message once
        per tick, across every running process of this queue.

        ``every`` (seconds or timedelta: ticks at its multiples since the Unix epoch) or
        ``cron`` (a 5-field cron expression, read in ``timezone``: an IANA name such as
        ``"Europe/Paris"`` or a ``ZoneInfo``, UTC by default). ``catch_up``: make up the
        ticks missed while nothing ran. ``name`` (default: the type) identifies it across
        processes: two periodic publishers of one type need two names. ``key``, ``meta``:
        as for :meth:`publish` (on a partitioned topic, without a key the name picks the
        partition every tick goes to). ``priority``: the level of its messages on a topic
        with priorities (as for :meth:`publish`; the middle level by default). The function
        takes no argument (plain ``def`` or ``async def``); it runs only in a process whose
        consumer runs (``mq.run()``, an App) or that runs ``mq.run_periodics()``.

        Raises ConfigError (at registration) for a bad expression or time zone, neither or
        both of ``every``/``cron``, ``timezone`` with ``every``, a name used twice, a
        ``priority`` that is not an int from 0 to 9 (and when it starts to run, for one
        that the topic's levels do not have, as :meth:`publish` does); HandlerError (a
        ConfigError) for ``@mq.periodic`` written without parentheses.
        """
        refuse_bare(self._owner, "periodic", message_type, '"report", every=60')

        def register(func: F) -> F:
            periodic = make_periodic(
                message_type, func, every=every, cron=cron, catch_up=catch_up, name=name,
                key=key, meta=meta, timezone=timezone, priority=priority,
            )  # fmt: skip
            self.add_periodic(periodic)
            return func

        return register

    def add_periodic(self, periodic: Periodic) -> None:
        """Register ``periodic``; a name registered here already is a ConfigError."""
        if any(p.name == periodic.name for p in self._periodics):
            raise ConfigError(
                f"a periodic publisher named {periodic.name!r} is registered already: "
                "give the second one its own name="
            )
        self._periodics.append(periodic)


def _with_outer(route: Route, outer: tuple[HandlerMiddleware, ...]) -> Route:
    if not outer:
        return route
    return dataclasses.replace(route, middlewares=(*outer, *route.middlewares))


def _upcast_without_version(upcast: Mapping[Any, Any]) -> str:
    """Why ``upcast=`` without ``version=`` is refused (the version would be 1, below
    every upcast key), and the ``version=`` the keys call for."""
    text = "upcast needs version=, the handler's current version (greater than every upcast key)"
    keys = list(upcast)
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in keys):
        return text
    steps = ", ".join(f"{k}: ..." for k in sorted(keys))
    return f"{text}: version={max(keys) + 1} for upcast={{{steps}}}"
