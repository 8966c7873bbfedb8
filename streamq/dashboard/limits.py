"""How many requests read from the server at once.

Each page that reads the server holds one of :data:`READ_SLOTS` slots while it reads and
renders (a download holds its slot until its last byte is sent). A request that finds
them all taken waits up to :data:`READ_WAIT` seconds for one, then gets 503 with
``Retry-After``: a burst of page loads (a reload storm, a script, someone's tabs) is
served a few at a time instead of each holding its share of memory at once.

A reading page also notes the damaged records of streamq's own keys that it set aside
(:func:`~streamq.wire.damage.noting`) in ``request.state.damaged``: the page names them.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..wire.damage import noting

READ_SLOTS = 4
READ_WAIT = 10.0
RETRY_AFTER = 5

Handler = Callable[[Request], Awaitable[Response]]


class ReadSlots:
    """A bounded number of concurrent reading requests, with a bounded wait for a slot."""

    def __init__(self, slots: int = READ_SLOTS, wait: float = READ_WAIT) -> None:
        self._semaphore = anyio.Semaphore(slots)
        self.wait = wait

    async def take(self) -> None:
        """Take a slot; raise HTTPException 503 if none was free within :attr:`wait`."""
        with anyio.move_on_after(self.wait):
            await self._semaphore.acquire()
            return
        raise HTTPException(
            503,
            "the dashboard is busy serving other pages: try again in a few seconds",
            headers={"Retry-After": str(RETRY_AFTER)},
        )

    def give_back(self) -> None:
        self._semaphore.release()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        await self.take()
        try:
            yield
        finally:
            self.give_back()


def slots_of(request: Request) -> ReadSlots:
    slots: ReadSlots = request.app.state.read_slots
    return slots


def reading(handler: Handler) -> Handler:
    """``handler`` run while holding a read slot (503 if none is free in time), noting
    the damaged records it sets aside."""

    @functools.wraps(handler)
    async def limited(request: Request) -> Response:
        async with slots_of(request).held():
            with noting() as request.state.damaged:
                return await handler(request)

    return limited
