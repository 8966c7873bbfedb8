"""Publish middlewares: ``async def mw(message_type, data, meta, call_next)`` around every
``publish`` of a queue (and every message of ``publish_many``).

``call_next(message_type, data, meta)`` publishes (through the next middleware, if any)
and returns the entry's ID, which the middleware returns in turn; a middleware may change
what is published (add a meta field, say) or refuse it by raising. Outer first, in the
order added. A queue without publish middlewares publishes as if the feature did not exist.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError

Meta = Mapping[str, str] | None
PublishNext = Callable[[str, Any, Meta], Awaitable[Any]]
PublishMiddleware = Callable[[str, Any, Meta, PublishNext], Awaitable[Any]]


def check_publish_middleware(mw: object) -> PublishMiddleware:
    """``mw`` if it is an async function: ``async def mw(message_type, data, meta, call_next)``."""
    call = getattr(mw, "__call__", None)  # noqa: B004 - callable objects
    if not (inspect.iscoroutinefunction(mw) or inspect.iscoroutinefunction(call)):
        raise ConfigError(
            f"a publish middleware is `async def mw(message_type, data, meta, call_next)`, "
            f"got {mw!r}"
        )
    return mw  # type: ignore[return-value]


def publish_chain(middlewares: Sequence[PublishMiddleware], publish: PublishNext) -> PublishNext:
    """``publish`` run through ``middlewares``, outer first."""
    call = publish
    for mw in reversed(middlewares):
        call = functools.partial(_through, mw, call)
    return call


async def _through(
    mw: PublishMiddleware, call_next: PublishNext, message_type: str, data: Any, meta: Meta
) -> Any:
    return await mw(message_type, data, meta, call_next)
