"""Permits taken ahead for a limit that does not bind: a consumer far under a type's rate
limit keeps a few permits in hand, so that its reads do not wait a round trip to the
limiter each.

A take of permits answers how many a take could still have now (``Grant.left``). While
that headroom is at least :data:`HEADROOM` times a read's need, the consumer takes, in the
background, permits for the next :data:`AHEAD` reads of that size, and those reads use
them without asking the server. The permits are real (taken by the same script, counted in
the same state): the limit holds across the group as before. Once the headroom shrinks (the
limit comes near to binding) nothing is taken ahead and every read asks the server, as
without credit. What is left in hand when the consumer stops or its entries stop coming is
not used: at most :data:`AHEAD` reads' worth per type and consumer, taken from a limit
far from binding. Only limits of a whole type keep credit (a limit by key has one state per key).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from ..errors import RedisFailure
from .limiter import Grant

log = logging.getLogger(__name__)

AHEAD = 4  # reads' worth of permits taken ahead (again once fewer than half are left)
HEADROOM = 4 * AHEAD  # take ahead only while the limiter could grant 4 times that at once

Take = Callable[[str, int], Awaitable[Grant]]  # (type, count) -> from the server


class Credit:
    """The permits in hand per limited type, and the takes that refill them."""

    def __init__(self, take: Take) -> None:
        self._take = take
        self._held: dict[str, int] = {}  # type -> permits in hand
        self._wanted: dict[str, int] = {}  # type -> permits to take ahead
        self._roomy: dict[str, bool] = {}  # type -> its last take left headroom enough
        self._size: dict[str, int] = {}  # type -> the most a read of it asked for
        self._taking: set[str] = set()  # types whose permits are being taken ahead
        self._wake = anyio.Event()

    async def take(self, type_name: str, count: int) -> Grant:
        """Up to ``count`` permits for ``type_name``: from those in hand, the rest from the
        server; taken ahead again if the limit's headroom allows."""
        held = self._held.get(type_name, 0)
        if held >= count:
            self._held[type_name] = held - count
            self._want(type_name, count)
            return Grant(count, 0.0)
        self._held[type_name] = 0
        grant = await self._take(type_name, count - held)
        size = max(count, self._size.get(type_name, 0))
        self._roomy[type_name] = grant.left >= HEADROOM * size
        self._want(type_name, count)
        return Grant(held + grant.granted, grant.wait_seconds, grant.left)

    def _want(self, type_name: str, count: int) -> None:
        size = self._size[type_name] = max(count, self._size.get(type_name, 0))
        held = self._held.get(type_name, 0)
        if (
            self._roomy.get(type_name, False)
            and 2 * held < AHEAD * size
            and type_name not in self._wanted
            and type_name not in self._taking
        ):
            self._wanted[type_name] = AHEAD * size - held
            self._wake.set()

    async def run(self) -> None:
        """Take ahead what :meth:`take` asked for, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            wanted, self._wanted = self._wanted, {}
            for type_name, count in wanted.items():
                self._taking.add(type_name)
                try:
                    grant = await self._take(type_name, count)
                except RedisFailure as e:  # the next read asks the server itself
                    log.debug("permits not taken ahead for %r: %s", type_name, e)
                    continue
                finally:
                    self._taking.discard(type_name)
                self._held[type_name] = self._held.get(type_name, 0) + grant.granted
                self._roomy[type_name] = grant.left >= HEADROOM * count // AHEAD
