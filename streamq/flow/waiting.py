"""What a group's running consumers hold back for flow control, reported to the server.

Each consumer counts the entries it holds back by reason (``mq.stats()``'s
``waiting_pause``, ``waiting_rate_limit``, ``waiting_throttle``; in ordered mode keys
waiting at an entry). :class:`WaitingReporter` writes those counts into one hash per
group on the topic's own slot, ``streamq:{<topic>}:waiting:<group>`` (consumer name ->
JSON ``{"at": <server ms>, "pause": n, "rate_limit": n, "throttle": n}``), riding on the
pause watch's poll of the group's pause record (:mod:`streamq.flow.watch`): no round trip
of its own. It writes at most every :data:`REPORT_INTERVAL`, and only when the counts
changed or an unchanged report is :data:`REPORT_REFRESH` old; a consumer holding nothing
back has no field (reaching zero removes it, and so does its first read: a report left
under its name by an earlier run goes), and stopping removes it too.

Readers (:func:`waiting_groups`: ``topic_info()``, the CLI, the dashboard) count only the
reports younger than :data:`REPORT_FRESH` (a few refreshes): a consumer that died stops
counting then. Each report written removes the reports of any consumer older than that,
and the key expires :data:`REPORT_FRESH` after the last report: the hash never holds more
than the consumers reporting lately. A report that is not what streamq writes, or a key of
another type, is logged once, counted as a damaged ``waiting`` record and skipped (a
report written over a key of another type replaces it).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..wire import records
from ..wire.damage import set_aside
from ..wire.flow_scripts import READ_FLOW
from ..wire.keys import Keys
from ..wire.records import DamagedRecord, WaitingReport

log = logging.getLogger(__name__)

REASONS = ("pause", "rate_limit", "throttle")  # as mq.stats()'s waiting_<reason> gauges
REPORT_INTERVAL = 1.0  # seconds: a consumer writes its report at most this often
REPORT_REFRESH = 5.0  # seconds: an unchanged report (not zero) is written again after this
REPORT_FRESH = 15.0  # seconds: readers count reports younger than this (3 refreshes)
WITHDRAW_TIMEOUT = 2.0  # seconds a stopping consumer gives the removal of its report

Counts = tuple[int, int, int]  # pause, rate_limit, throttle
_NONE: Counts = (0, 0, 0)


@dataclass(frozen=True, slots=True)
class Report:
    """One consumer's report, due to be written: the script's key and arguments."""

    key: str
    consumer: str
    counts: Counts

    def args(self) -> list[str]:
        """ARGV of :data:`~streamq.wire.flow_scripts.READ_FLOW`."""
        members = ",".join(f'"{r}":{n}' for r, n in zip(REASONS, self.counts, strict=True))
        fresh = str(int(REPORT_FRESH * 1000))  # counted this long; the key kept as long
        return [self.consumer, members if any(self.counts) else "", fresh, fresh]

    def replaced(self, found: bytes | str | None) -> None:
        """The script's answer: the type of a key it replaced, or None."""
        if found is not None:
            damaged = records.waiting_kind(self.key, found)
            if damaged is not None:
                set_aside(damaged, "replaced by the consumer's report")


class WaitingReporter:
    """Reports of ``consumer`` in ``group`` of the topic ``stream``: ``counts`` gives the
    entries it holds back now, by reason (``pause``, ``rate_limit``, ``throttle``)."""

    def __init__(
        self,
        stream: str,
        group: str,
        consumer: str,
        counts: Callable[[], Mapping[str, int]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key, self.consumer = Keys(stream).waiting(group), consumer
        self._counts, self._clock = counts, clock
        # what the server holds for this consumer; unknown at the start: the first read
        # writes (or removes) it, so a report left under this name by an earlier run goes
        self._written: Counts | None = None
        self._at = -math.inf  # when it was written (the clock's seconds)

    def due(self) -> Report | None:
        """The report to write now, or None (no change, or written too lately)."""
        now = self._clock()
        if now - self._at < REPORT_INTERVAL:
            return None
        found = self._counts()
        counts: Counts = (found.get("pause", 0), found.get("rate_limit", 0),
                          found.get("throttle", 0))  # fmt: skip
        if counts == self._written and (counts == _NONE or now - self._at < REPORT_REFRESH):
            return None
        return Report(self.key, self.consumer, counts)

    def written(self, report: Report) -> None:
        self._written, self._at = report.counts, self._clock()

    async def withdraw(self, client: aioredis.Redis) -> None:
        """Remove this consumer's report (it stops); a failure is only logged: the report
        stops counting once it is :data:`REPORT_FRESH` old."""
        if self._written == _NONE:
            return  # nothing of this consumer on the server
        with anyio.move_on_after(WITHDRAW_TIMEOUT):
            try:
                await client.hdel(self.key, self.consumer)
                self._written = _NONE
            except RedisFailure as e:
                log.debug("cannot remove the waiting report of %r (%s)", self.consumer, e)


@dataclass(frozen=True, slots=True)
class GroupWaiting:
    """What a group's running consumers hold back for flow control, as they reported it
    within the last :data:`REPORT_FRESH` seconds: entries (in ordered mode keys waiting at
    an entry) by reason, summed over the consumers, and each consumer's report."""

    pause: int = 0
    rate_limit: int = 0
    throttle: int = 0
    consumers: dict[str, WaitingReport] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Everything held back, whatever the reason."""
        return self.pause + self.rate_limit + self.throttle


def _summed(reports: Iterable[WaitingReport]) -> GroupWaiting:
    found = sorted(reports, key=lambda r: r.consumer)
    return GroupWaiting(
        sum(r.pause for r in found), sum(r.rate_limit for r in found),
        sum(r.throttle for r in found), {r.consumer: r for r in found},
    )  # fmt: skip


async def waiting_groups(
    client: aioredis.Redis, stream: str, groups: Iterable[str]
) -> dict[str, GroupWaiting]:
    """The fresh reports of ``groups`` of the topic ``stream`` (``client`` serves its own
    keys) in one round trip: group -> :class:`GroupWaiting`, for the groups with one."""
    names = sorted(set(groups))
    if not names:
        return {}
    keys = [Keys(stream).waiting(group) for group in names]
    clock, *replies = await client.register_script(READ_FLOW)(keys=keys)
    now_ms = int(clock[0]) * 1000 + int(clock[1]) // 1000
    found = {}
    for group, key, reply in zip(names, keys, replies, strict=True):
        reports = _fresh(key, reply, now_ms)
        if reports:
            found[group] = _summed(reports)
    return found


def _fresh(key: str, reply: Sequence[Any], now_ms: int) -> list[WaitingReport]:
    kind, flat = reply
    wrong = records.waiting_kind(key, kind)
    if wrong is not None:
        set_aside(wrong, "not counted: the group's waiting entries are not shown")
        return []
    reports = []
    for name, value in zip(flat[::2], flat[1::2], strict=True):
        report = records.waiting_report(key, name, value, now_ms)
        if isinstance(report, DamagedRecord):
            set_aside(report, "not counted")
        elif now_ms - report.at_ms <= REPORT_FRESH * 1000:
            reports.append(report)
    return reports
