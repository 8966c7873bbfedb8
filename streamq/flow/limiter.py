"""The server-side rate limiter: permits of a :class:`~streamq.flow.rate.RateLimit` taken
by one script on the slot of the topic's own keys, so every consumer of the group, in
every process, draws from the same limit.

The state is one expiring number per limited type (or key):
``streamq:{<topic>}:rate:<group length>:<group>:<type length>:<type>[:key:<key>|:none]``
(:meth:`~streamq.wire.keys.Keys.rate`), the GCRA's theoretical arrival time
(:data:`~streamq.wire.flow_scripts.RATE_TAKE`). An idle limiter leaves nothing behind: its
key expires once it is as good as absent. A take asks for up to ``count`` permits (a
batch: one per entry) and is told how many it got and how long until the next one; the
caller sleeps that long rather than asking again at once.

On a partitioned topic the limiter lives on the slot of the topic's own name (as its
partitions record does), not on a partition's: one limit for the whole topic.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from ..wire.damage import set_aside
from ..wire.flow_scripts import RATE_TAKE
from ..wire.keys import Keys
from ..wire.records import MAX_RATE_AHEAD_US, damaged_rate
from .rate import RateLimit


@dataclass(frozen=True, slots=True)
class Grant:
    """What a take got: ``granted`` permits (0 to the count asked for) and the seconds
    until the next permit (0.0 when one is free now). A caller short of permits sleeps
    ``wait_seconds`` before it asks again."""

    granted: int
    wait_seconds: float
    left: int = 0  # permits a take could still have now (the limit's headroom)


class RateLimiter:
    """Takes permits of ``rate`` from the server (the limiter holds only the limit)."""

    def __init__(self, rate: RateLimit) -> None:
        self.rate = rate
        interval_us = rate.interval * 1_000_000
        # the script's arguments but the count, as text once
        self._interval = repr(interval_us)
        self._tolerance = repr((rate.burst - 1) * interval_us)
        self._bound = str(MAX_RATE_AHEAD_US)

    def key(self, stream: str, group: str, type_name: str, key: str | None) -> str:
        """The limiter's key of ``type_name`` (and ``key``, for a limit by key) in
        ``group`` of the topic ``stream``."""
        return Keys(stream).rate(group, type_name, per_key=self.rate.per_key, key=key)

    async def take(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        type_name: str,
        key: str | None,
        count: int = 1,
    ) -> Grant:
        """Take up to ``count`` permits (>= 1) for ``type_name`` in ``group`` of the
        topic ``stream``; ``key`` is the entry's key under the limit
        (:meth:`RateLimit.key_of`, ignored for a limit of the whole type). ``client``
        serves the topic's own keys (on a cluster: the slot of ``stream``).

        One round trip. Raises ValueError for a count below 1; streamq's RedisFailure
        errors as every command does. A state that is not the limiter's (damaged, of
        another type) is replaced, logged once and counted."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        name = self.key(stream, group, type_name, key)
        args = [self._interval, self._tolerance, count, self._bound]
        granted, wait_us, damaged, *left = await client.register_script(RATE_TAKE)(
            keys=[name], args=args
        )
        if damaged is not None:
            set_aside(damaged_rate(name, damaged), "replaced: the limit starts afresh")
        return Grant(int(granted), int(wait_us) / 1_000_000, int(left[0]) if left else 0)
