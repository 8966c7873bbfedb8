"""Repeated log records, summarised: the first of a kind in full, then a count per interval.

A consumer can make the same record thousands of times a minute (10,000 entries of a type
nobody here handles, each delivered several times; a handler failing on every entry), which
buries everything else and fills disks. Each site that repeats per entry logs through its
consumer's :class:`LogSummary` under a *kind* (a plural phrase, such as ``"entries without
a handler here"``): the first record of a kind is logged as it is, those that follow within
``interval`` are only counted, and when the interval is over one record says::

    …and 9,999 more entries without a handler here in the last 10 s

The next one after that is logged in full again and starts a new interval, so a steady
flood makes two records of each kind per interval. Nothing about an entry is lost by this:
its outcome is in Redis (pending, or a dead letter with the full reason).

Summarising happens only on these rare paths (failures, bad input), never per handled
entry; a count is one dict lookup and an addition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from .logs import ENTRY

SUMMARY_INTERVAL = 10.0
# An error in a repeated record is cut to this (describe() allows 2,000 characters; the
# first record of a kind carries the exception with its traceback in full).
SHORT_ERROR = 300


def shortened(text: str, limit: int = SHORT_ERROR) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


@dataclass(slots=True)
class _Window:
    logger: logging.Logger
    level: int
    started: float
    ends: float
    count: int = 0


class LogSummary:
    """The repeated records of one consumer, by kind (see the module's docstring).

    ``interval``: seconds a kind's count is gathered before it is reported (default
    :data:`SUMMARY_INTERVAL`). Call
    :meth:`run` in a task to report counts when their interval ends (else they are reported
    by the next record of their kind), and :meth:`flush` with ``everything=True`` when the
    consumer ends.
    """

    def __init__(
        self, interval: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = SUMMARY_INTERVAL if interval is None else interval
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def log(
        self,
        logger: logging.Logger,
        kind: str,
        level: int,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> None:
        """Log ``msg % args`` on ``logger`` if it is the first of ``kind`` in the interval,
        else count it. ``kind`` is a plural phrase for the summary line."""
        now = self._clock()
        window = self._windows.get(kind)
        if window is not None:
            if now < window.ends:
                window.count += 1
                return
            self._report(kind, window, now)
        logger.log(level, msg, *args, exc_info=exc_info, stacklevel=2)  # the caller's line
        self._windows[kind] = _Window(logger, level, now, now + self.interval)

    def flush(self, *, everything: bool = False) -> None:
        """Report the counts of the intervals that are over (``everything``: of all)."""
        now = self._clock()
        for kind, window in list(self._windows.items()):
            if everything or now >= window.ends:
                del self._windows[kind]
                self._report(kind, window, now)

    async def run(self) -> None:
        """Report counts as their intervals end, until cancelled."""
        while True:
            await anyio.sleep(self.interval / 4)
            self.flush()

    @staticmethod
    def _report(kind: str, window: _Window, now: float) -> None:
        if not window.count:
            return
        seconds = min(now, window.ends) - window.started
        token = ENTRY.set(None)  # about many entries: not the one being processed now
        try:
            window.logger.log(
                window.level, "…and %s more %s in the last %.0f s",
                f"{window.count:,}", kind, max(seconds, 1),
            )  # fmt: skip
        finally:
            ENTRY.reset(token)
