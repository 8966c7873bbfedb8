""":class:`FlowGate`: everything the consumer engine asks of flow control, in one object.

Before an entry takes a handler slot the engine asks, in this order (each answer says how
long to wait; a waiting entry holds no slot and counts no delivery):

1. :meth:`FlowGate.paused` — no round trip; :meth:`FlowGate.wait_unpaused` waits.
2. :meth:`FlowGate.throttled` — one round trip for any number of keys of a type.
3. :meth:`FlowGate.take` — one round trip per take (a batch takes one permit per entry),
   none for a type without a limit.

and when a handler raises :class:`~streamq.Throttle`, it calls :meth:`FlowGate.throttle`
and runs the entry again once the throttle ends. :meth:`FlowGate.run` keeps the pause
view current (start it with ``tg.start``), and with :meth:`FlowGate.report_as` reports
what the consumer holds back to the server on the same reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import redis.asyncio as aioredis

from ..message import Message
from ..signals import Throttle
from .settings import FlowConfig
from .throttle import throttle, throttled_keys, throttled_types
from .waiting import WaitingReporter
from .watch import POLL_INTERVAL, PauseWatch

if TYPE_CHECKING:
    from .credit import Credit
    from .limiter import Grant, RateLimiter


class FlowGate:
    """Flow control of ``group`` on the topic ``stream`` (its own name, for a partitioned
    topic too), through ``client`` (the client of the topic's own keys:
    ``TopicHandle.client``), under the limits of ``config``."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        config: FlowConfig,
        *,
        poll_interval: float = POLL_INTERVAL,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._client, self._stream, self._group = client, stream, group
        self.config = config
        self.pauses = PauseWatch(client, stream, group, interval=poll_interval, on_change=on_change)
        self._limiters: dict[str, RateLimiter] = {}
        self._credit: Credit | None = None
        if config.rate_limits:
            # loaded on first use: a queue without rate limits never loads the limiter
            from .credit import Credit
            from .limiter import RateLimiter

            self._limiters = {t: RateLimiter(r) for t, r in config.rate_limits.items()}
            self._credit = Credit(self._take_from_server)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep the pause view current and take permits ahead for limits far from binding
        (:mod:`.credit`), until cancelled (ready once the pauses were first read)."""
        if self._credit is None:  # no rate limit: no permits to take ahead
            await self.pauses.run(task_status=task_status)
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._credit.run)
            await self.pauses.run(task_status=task_status)

    def report_as(self, consumer: str, counts: Callable[[], Mapping[str, int]]) -> None:
        """Report what ``consumer`` holds back (``counts``: entries by reason, as
        ``mq.stats()``'s ``waiting_<reason>``) to the server while :meth:`run` runs, on the
        pause record's reads (:mod:`.waiting`); the report is removed when it stops."""
        self.pauses.reporter = WaitingReporter(self._stream, self._group, consumer, counts)

    # -- pause ----------------------------------------------------------------------
    def paused(self, type_name: str) -> bool:
        """Whether entries of ``type_name`` must wait (no round trip)."""
        return self.pauses.paused(type_name)

    async def wait_unpaused(self, type_name: str) -> None:
        """Return once entries of ``type_name`` may run again."""
        await self.pauses.wait_unpaused(type_name)

    # -- rate limits ----------------------------------------------------------------
    def limited(self, type_name: str) -> bool:
        """Whether ``type_name`` has a rate limit (no round trip)."""
        return type_name in self._limiters

    def key_of(self, message: Message[Any]) -> str | None:
        """The key ``message`` is limited under (its type's ``RateLimit.key_of``; None
        for a type without limit). Whatever a ``by=`` function raises propagates: the
        engine logs it and limits the entry with those without a key."""
        limiter = self._limiters.get(message.type)
        return None if limiter is None else limiter.rate.key_of(message)

    async def take(self, type_name: str, key: str | None, count: int = 1) -> Grant:
        """Up to ``count`` permits for entries of ``type_name`` under ``key``
        (:meth:`key_of`); all of them at once, without a round trip, for a type without
        limit. Short of permits, sleep ``wait_seconds`` before asking again."""
        limiter = self._limiters.get(type_name)
        if limiter is None:
            # loaded here: the engine asks limited() first and takes no permits without a limit
            from .limiter import Grant

            return Grant(count, 0.0)
        if not limiter.rate.per_key:  # a limit of the whole type: permits may be in hand
            assert self._credit is not None  # made with the limiters
            return await self._credit.take(type_name, count)
        return await limiter.take(self._client, self._stream, self._group, type_name, key, count)

    async def _take_from_server(self, type_name: str, count: int) -> Grant:
        limiter = self._limiters[type_name]
        return await limiter.take(self._client, self._stream, self._group, type_name, None, count)

    # -- throttles ------------------------------------------------------------------
    async def throttled(
        self, type_name: str, keys: Iterable[str | None]
    ) -> dict[str | None, float]:
        """Publish key -> seconds its entries of ``type_name`` must still wait (0.0: they
        may run), for every key of ``keys``, in one round trip."""
        return await throttled_keys(self._client, self._stream, self._group, type_name, keys)

    async def throttled_types(self, types: Iterable[str]) -> set[str]:
        """Of ``types``, those with a throttle in force in the group (set by any consumer),
        in one round trip."""
        return await throttled_types(self._client, self._stream, self._group, types)

    async def throttle(self, type_name: str, key: str | None, signal: Throttle) -> float:
        """A handler raised ``signal`` for an entry of ``type_name`` with publish key
        ``key``: hold back that key (or the type, by the signal's scope) for every
        consumer of the group. Returns the seconds it is now held back (the longer of
        this and a throttle in force)."""
        return await throttle(
            self._client, self._stream, self._group, type_name, key, signal.retry_after,
            scope=signal.scope,
        )  # fmt: skip
