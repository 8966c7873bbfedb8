"""Handler middlewares: ``async def mw(msg, call_next)`` around every handler call.

A middleware gets the :class:`~streamq.Message` (a batch handler's call: the list) and
``call_next``, which runs the next middleware or, innermost, the handler, and returns what
the handler returned. Middlewares run outer first, in the order they were added: the App's,
then the queue's, then the router's. Whatever a middleware raises is the entry's failure,
exactly as if the handler had raised it (retried, then dead-lettered).

The chains are built once, when a consumer starts: a queue without middlewares hands its
routes to the consumer as they are, so the hot path pays nothing for the feature.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio.to_thread

from ..errors import ConfigError
from .routes import Route, Routes

CallNext = Callable[[Any], Awaitable[Any]]
HandlerMiddleware = Callable[[Any, CallNext], Awaitable[Any]]


def check_handler_middleware(mw: object) -> HandlerMiddleware:
    """``mw`` if it can wrap handler calls: ``async def mw(msg, call_next)``."""
    if not callable(mw) or not _is_async(mw) or not takes_parameters(mw, 2):
        raise ConfigError(
            f"a handler middleware is `async def mw(msg, call_next)`, got {mw!r} "
            "(a publish middleware is `async def mw(message_type, data, meta, call_next)`)"
        )
    return mw


def takes_parameters(func: object, count: int) -> bool:
    """Whether ``func`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(func).bind(*range(count))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def with_middlewares(router: Routes, outer: Sequence[HandlerMiddleware]) -> Routes:
    """``router`` itself when no route has a middleware to run; else a copy whose handlers
    run through ``outer`` (then each route's own middlewares) first."""
    if not outer and not any(route.middlewares for route in router.routes.values()):
        return router
    wrapped = Routes()
    for route in router.routes.values():
        wrapped.adopt(_wrapped_route(route, (*outer, *route.middlewares)))
    return wrapped


def _wrapped_route(route: Route, middlewares: Sequence[HandlerMiddleware]) -> Route:
    if not middlewares:
        return route
    single = batch = None
    if route.single is not None:
        single = _chain(middlewares, _as_async(route.single, route.single_is_async))
    if route.batch is not None:
        batch = _chain(middlewares, _as_async(route.batch, route.batch_is_async))
    return dataclasses.replace(
        route, single=single, single_is_async=True, batch=batch, batch_is_async=True,
        middlewares=(),
    )  # fmt: skip


def _as_async(func: Callable[[Any], Any], is_async: bool) -> CallNext:
    if is_async:
        return func

    async def in_thread(arg: Any) -> Any:  # a plain `def` handler runs in a thread, as usual
        return await anyio.to_thread.run_sync(func, arg)

    return in_thread


def _chain(middlewares: Sequence[HandlerMiddleware], handler: CallNext) -> CallNext:
    call = handler
    for mw in reversed(middlewares):
        call = functools.partial(_through, mw, call)
    return call


async def _through(mw: HandlerMiddleware, call_next: CallNext, arg: Any) -> Any:
    return await mw(arg, call_next)


def _is_async(func: object) -> bool:
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)
