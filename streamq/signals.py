"""Signals a handler raises to steer delivery. They are not failures.

* ``Retry(delay=...)``: try this entry again later; the entry stays pending and this
  consumer re-claims it after ``delay`` (counts as a delivery).
* ``Reject(reason)``: this entry can never succeed; dead-letter it now.
* ``PartialFailure({id: reason})``: from a batch handler, only the named entries failed;
  the rest of the batch is acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

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
        super().__init__(f"{len(failed)} entries of the batch failed")
        self.failed: dict[str, BaseException] = {
            k: ReportedFailure(v) if isinstance(v, str) else v for k, v in failed.items()
        }


class ReportedFailure(Exception):
    """One entry's failure as reported by a batch handler through PartialFailure."""
