"""``RateLimit``: how many entries of a type the handlers of a group may start per period,
across every consumer of the group (held on the server: :mod:`streamq.flow.limiter`).

``RateLimit(100)`` is 100 per second for the whole type; ``RateLimit(10, by="key")`` is 10
per second for each publish key; ``by=`` a function of the message limits each value it
returns on its own (a tenant in ``meta``, say). The limit is checked when it is defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..config import MAX_RATE_PERIOD, Duration, seconds
from ..errors import ConfigError
from ..message import Message

# The default burst: this share of the limit may be taken at once (at least one permit).
BURST_SHARE = 0.05

By = Literal["key"] | Callable[[Message[Any]], object] | None


@dataclass(frozen=True, slots=True, init=False)
class RateLimit:
    """At most ``limit`` entries per ``per`` seconds (a number or a ``timedelta``), for the
    whole type or, with ``by``, for each key on its own.

    Parameters:
        limit: permits per period, an integer >= 1.
        per: the period, more than 0 and at most a day (86400 s).
        by: ``None`` (the whole type), ``"key"`` (each publish key; entries without one
            share one limit), or a function of the :class:`~streamq.Message` returning
            the key to limit by (``None`` for the shared keyless limit; anything else is
            turned into text).
        burst: how many permits may be taken at once after a quiet spell (a batch of
            entries, or a consumer catching up): an integer from 1 to ``limit``. The
            default is 5% of ``limit`` (at least 1). Whatever the burst, the rate over
            time is ``limit`` per ``per``; in any one window of ``per`` at most
            ``limit + burst - 1`` permits are granted, so ``burst=1`` never lets more
            than ``limit`` through in any window; but then each permit must be taken
            when it falls due, and a taker that comes a little late (a round trip, a
            busy event loop) loses that time: the rate reached falls short of the limit
            by the takers' lateness (about 10% at 100/s on a loaded machine).

    Raises ConfigError for a limit, period, ``by`` or burst that cannot be.
    """

    limit: int
    per: float
    by: By
    burst: int

    def __init__(
        self, limit: int, per: Duration = 1.0, by: By = None, *, burst: int | None = None
    ) -> None:
        object.__setattr__(self, "limit", _limit(limit))
        object.__setattr__(self, "per", _period(per))
        object.__setattr__(self, "by", _by(by))
        object.__setattr__(self, "burst", _burst(burst, self.limit))

    @property
    def per_key(self) -> bool:
        """Whether each key has a limit of its own (``by`` is given)."""
        return self.by is not None

    @property
    def interval(self) -> float:
        """Seconds between two permits at the limit's rate."""
        return self.per / self.limit

    def key_of(self, message: Message[Any]) -> str | None:
        """The key ``message`` is limited under: ``None`` when ``by`` is ``None`` (the
        whole type) or for a message without key; what ``by`` says otherwise. Whatever
        a ``by`` function raises propagates (the caller decides what it means)."""
        if self.by is None:
            return None
        if self.by == "key":
            return message.key
        assert callable(self.by)
        found = self.by(message)
        return None if found is None else str(found)

    def __repr__(self) -> str:
        by = "" if self.by is None else f", by={self.by!r}"
        return f"RateLimit({self.limit}, per={self.per:g}{by}, burst={self.burst})"


def _limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        hint = (
            " (a fraction: RateLimit(1, per=2.0) is one every 2 s)" if _is_fraction(limit) else ""
        )
        raise ConfigError(
            f"RateLimit limit must be an integer >= 1 (permits per period), got {limit!r}{hint}"
        )
    return limit


def _is_fraction(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def _period(per: Duration) -> float:
    result = seconds(per, "RateLimit per", allow_zero=False)
    if result > MAX_RATE_PERIOD:
        raise ConfigError(
            f"RateLimit per must be at most {MAX_RATE_PERIOD:g} s (a day), got {per!r}: "
            "for a longer quota, limit a day's share (7000 a week: RateLimit(1000, "
            "per=timedelta(days=1)))"
        )
    return result


def _by(by: object) -> By:
    if by is None or by == "key" or (callable(by) and not isinstance(by, str | type)):
        return by
    raise ConfigError(
        f"RateLimit by must be None (the whole type), 'key' (each publish key) or a function "
        f"of the message returning its key (by=lambda msg: msg.meta['tenant']), got {by!r}"
    )


def _burst(burst: object, limit: int) -> int:
    if burst is None:
        return max(1, int(limit * BURST_SHARE))
    if not isinstance(burst, int) or isinstance(burst, bool) or not 1 <= burst <= limit:
        raise ConfigError(
            f"RateLimit burst must be an integer from 1 to the limit ({limit}), got {burst!r}"
        )
    return burst
