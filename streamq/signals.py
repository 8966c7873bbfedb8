"""Signals a handler raises to steer delivery. They are not failures.

* ``Retry(delay=...)``: try this entry again later; the entry stays pending and this
  consumer re-claims it after ``delay`` (counts as a delivery).
* ``Reject(reason)``: this entry can never succeed; dead-letter it now.
* ``PartialFailure({id: reason})``: from a batch handler, only the named entries failed;
  the rest of the batch is acknowledged.
* ``Throttle(retry_after=30, scope="key")``: the service this handler calls says "not now"
  (an HTTP 429, say): hold back this entry's key (or its whole type) across every consumer
  of the group for ``retry_after`` seconds, then run the entry again; no failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Literal

from .config import MAX_THROTTLE
from .errors import ConfigError


class HandlerSignal(Exception):
    """Base of the signals a handler may raise."""


class Retry(HandlerSignal):
    """Ask for this entry to be delivered again after ``delay`` seconds."""

    def __init__(self, delay: float | timedelta = 0.0) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not seconds >= 0:  # negative or NaN
            raise ConfigError(f"Retry delay must be >= 0 seconds, got {delay!r}")
        super().__init__(f"retry in {seconds:g}s")
        self.delay = seconds


class Reject(HandlerSignal):
    """Dead-letter this entry at once with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PartialFailure(HandlerSignal):
    """Raised by a batch handler: only these entry IDs failed (ID -> reason or exception).

    A reason given as text is recorded as a :class:`ReportedFailure` with that text; an
    exception is recorded as itself (its type and traceback reach the dead letter).
    """

    def __init__(self, failed: Mapping[str, str | BaseException]) -> None:
        if not isinstance(failed, Mapping):
            raise ConfigError(
                "PartialFailure takes a mapping {entry id: reason or exception}, e.g. "
                f"PartialFailure({{msg.id: 'out of stock'}}), got {type(failed).__name__}"
            )
        super().__init__(f"{len(failed)} entries of the batch failed")
        self.failed: dict[str, BaseException] = {}
        for entry_id, why in failed.items():
            if not isinstance(why, str | BaseException):
                raise ConfigError(
                    f"PartialFailure: the reason for {entry_id!r} must be text or an "
                    f"exception, got {type(why).__name__}"
                )
            self.failed[str(entry_id)] = ReportedFailure(why) if isinstance(why, str) else why


class Throttle(HandlerSignal):
    """Hold back this entry's key (``scope="key"``, entries without a key together) or its
    whole type (``scope="type"``) in the group, on every consumer, for ``retry_after``
    seconds (a number or a ``timedelta``, up to a day); the entry runs again after it. It
    counts as no failure and no delivery toward the dead-letter limit.

    Raises ConfigError for a ``retry_after`` that is not a number of seconds above 0 (a
    ``Retry-After`` header is text: convert it, ``float(...)``) or an unknown scope.
    """

    def __init__(
        self, retry_after: float | timedelta, scope: Literal["key", "type"] = "key"
    ) -> None:
        seconds = _throttle_seconds(retry_after)
        if scope not in ("key", "type"):
            raise ConfigError(
                f"Throttle scope must be 'key' (this entry's key) or 'type' (its whole "
                f"type), got {scope!r}"
            )
        super().__init__(f"throttled for {seconds:g}s ({scope})")
        self.retry_after = seconds
        self.scope: Literal["key", "type"] = scope


def _throttle_seconds(retry_after: object) -> float:
    if isinstance(retry_after, timedelta):
        seconds = retry_after.total_seconds()
    elif isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
        seconds = float(retry_after)
    else:
        hint = " (text: convert it first, float(...))" if isinstance(retry_after, str) else ""
        raise ConfigError(
            f"Throttle retry_after must be a number of seconds or a timedelta, got "
            f"{retry_after!r}{hint}"
        )
    if not 0 < seconds <= MAX_THROTTLE:  # also NaN
        raise ConfigError(
            f"Throttle retry_after must be more than 0 and at most {MAX_THROTTLE:g} seconds "
            f"(a day; to hold a type back longer, pause it: mq.pause(type=...)), got "
            f"{retry_after!r}"
        )
    return seconds


class ReportedFailure(Exception):
    """One entry's failure as reported by a batch handler through PartialFailure."""
