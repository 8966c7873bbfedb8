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

from collections.abc import Iterable, Sequence

from ._facade_registration import Registering
from ._registration import Registry
from .consume.middlewares import HandlerMiddleware
from .consume.routes import Route


class Router(Registering):
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
