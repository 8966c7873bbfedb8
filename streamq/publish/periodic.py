"""Periodic publishing: ``@mq.periodic("report", every=60)`` (or ``cron="*/5 * * * *"``,
``timezone="Europe/Paris"``) publishes what the function returns, one message per tick
across every running process.

Ticks are instants every process computes alike: multiples of ``every`` seconds since the
Unix epoch, or the times a cron expression names (parsed by ``cronsim``), read in UTC or in
the publisher's IANA time zone (``zoneinfo``): ``cron="0 9 * * *", timezone="Europe/Paris"``
is 09:00 in Paris in winter and in summer. Across a daylight-saving change cronsim does as
Debian's cron does for an expression with a fixed minute and hour: a time the clock skips
runs at the first minute after the change, a time the clock repeats runs once (the first).

This module holds what a publisher is (a queue's or a Router's registry registers them);
how processes share its ticks is :mod:`streamq.publish.periodic_runner` (and
:mod:`streamq.publish.ticks` on the server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigError, MessageFormatError
from ..message import validate_type_name
from ..wire.keys import Keys
from ..wire.partition_names import MAX_PRIORITIES, check_priority

MIN_CLAIM_TTL = 60.0  # a tick's claim outlives every process's view of that tick
MAX_CLAIM_TTL = 86400.0
MAX_CRON_STEPS = 10  # cron times one next_tick looks at (a repeated hour gives two)


@dataclass(frozen=True, slots=True)
class Periodic:
    """One periodic publisher: ``func`` gives the data of a ``message_type`` message per
    tick (``every`` seconds, or per ``cron`` expression in ``timezone``, UTC if None)."""

    name: str
    message_type: str
    func: Callable[[], Any]
    every: float | None = None
    cron: str | None = None
    catch_up: bool = False
    key: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    timezone: str | None = None
    priority: int | None = None  # the level of its messages (None: the topic's default)

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (Unix seconds)."""
        if self.every is not None:
            return (after // self.every + 1) * self.every
        assert self.cron is not None
        from cronsim import CronSim  # only a process with a cron publisher loads it

        zone: tzinfo = UTC if self.timezone is None else ZoneInfo(self.timezone)
        times = CronSim(self.cron, datetime.fromtimestamp(after, zone).replace(microsecond=0))
        for _ in range(MAX_CRON_STEPS):
            # cronsim starts from the whole second, and across a repeated hour it reads
            # the wall clock: a time it gives may lie before ``after``
            tick = next(times).timestamp()
            if tick > after:
                return tick
        raise ConfigError(f"cron expression {self.cron!r} gives no time after {after}")

    def claim_ttl(self, tick: float) -> float:
        """How long a tick's claim is kept (its window): two periods, within bounds."""
        period = self.next_tick(tick) - tick
        return min(max(2 * period, MIN_CLAIM_TTL), MAX_CLAIM_TTL)


def make_periodic(
    message_type: str,
    func: Callable[[], Any],
    *,
    every: float | timedelta | None,
    cron: str | None,
    catch_up: bool,
    name: str | None,
    key: str | None,
    meta: Mapping[str, str] | None,
    timezone: str | ZoneInfo | None = None,
    priority: int | None = None,
) -> Periodic:
    """A checked :class:`Periodic`; ConfigError naming what is wrong (a ``priority`` is
    checked against the topic's levels when the publisher runs: a Router's knows none)."""
    try:
        validate_type_name(message_type)
    except MessageFormatError as e:
        raise ConfigError(str(e)) from e
    if not callable(func):
        raise ConfigError(f"@periodic decorates a function, got {func!r}")
    if (every is None) == (cron is None):
        raise ConfigError("give a periodic publisher either every= (seconds) or cron='...'")
    if every is not None:
        every = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise ConfigError(f"every must be a number of seconds > 0, got {every!r}")
        if timezone is not None:
            raise ConfigError(
                "timezone= applies to cron= expressions; every= ticks are counted from the "
                "Unix epoch, the same instants in every zone"
            )
    zone = _zone_name(timezone)
    if cron is not None:
        _check_cron(cron, zone)
    if not isinstance(catch_up, bool):
        raise ConfigError(f"catch_up must be True or False, got {catch_up!r}")
    label = name if name is not None else message_type
    if not isinstance(label, str) or not label or ":" in label:
        raise ConfigError(f"periodic name must be a non-empty string without ':', got {label!r}")
    if priority is not None:
        check_priority(priority, MAX_PRIORITIES)
    every_s = None if every is None else float(every)
    return Periodic(label, message_type, func, every_s, cron, catch_up, key, dict(meta or {}),
                    zone, priority)  # fmt: skip


def periodic_levels(periodics: Iterable[Periodic], priorities: int) -> dict[str, int]:
    """The level of each publisher's messages (by name) on a topic of ``priorities``
    levels; ConfigError naming the publisher whose ``priority`` the topic does not have."""
    levels = {}
    for periodic in periodics:
        try:
            levels[periodic.name] = check_priority(periodic.priority, priorities)
        except ConfigError as e:
            raise ConfigError(f"periodic publisher {periodic.name!r}: {e}") from None
    return levels


def _zone_name(timezone: object) -> str | None:
    """The IANA name of ``timezone`` (a name or a ZoneInfo), None for UTC by default;
    ConfigError for a zone the time-zone database does not know."""
    if timezone is None:
        return None
    if isinstance(timezone, ZoneInfo):
        timezone = timezone.key
    if not isinstance(timezone, str) or not timezone:
        raise ConfigError(
            f"timezone must be an IANA time zone name such as 'Europe/Paris', got {timezone!r}"
        )
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigError(
            f"timezone {timezone!r} is not a time zone this system knows (IANA names such as "
            "'Europe/Paris'; install the tzdata package where the system has no database)"
        ) from e
    return timezone


def _check_cron(cron: object, zone: str | None) -> None:
    from cronsim import CronSim, CronSimError  # only a process with a cron publisher loads it

    if not isinstance(cron, str):
        raise ConfigError(f"cron must be a string such as '*/5 * * * *', got {cron!r}")
    start = datetime.now(UTC if zone is None else ZoneInfo(zone))
    try:
        next(CronSim(cron, start))  # also: an expression that never matches
    except (CronSimError, StopIteration) as e:
        raise ConfigError(f"cron expression {cron!r} is not valid: {e}") from e


def record_key(topic: str) -> str:
    """Hash: periodic name -> the last tick published (Unix ms); ``<name>:spec`` -> what
    it publishes and when (JSON: type, every, cron, timezone), written by every process
    that runs it, for listings (:func:`streamq.publish.scheduled.periodic_publishers`).
    The same hash of a partition stream holds its ticks' state
    (:mod:`streamq.publish.ticks`)."""
    return Keys(topic).periodic


def spec_of(periodic: Periodic) -> str:
    return json.dumps({"type": periodic.message_type, "every": periodic.every,
                       "cron": periodic.cron, "timezone": periodic.timezone})  # fmt: skip


def from_spec(name: str, spec: str) -> Periodic | None:
    """The Periodic a listing reads back (its function is not known there); None if the
    spec is not one streamq wrote."""
    try:
        fields = json.loads(spec)
        every, cron, zone = fields.get("every"), fields.get("cron"), fields.get("timezone")
        if zone is not None:
            ZoneInfo(zone)  # a zone this system lacks: not listed rather than a crash
        return Periodic(name, str(fields["type"]), _unknown, every, cron, timezone=zone)
    except (ValueError, KeyError, TypeError, AttributeError, ZoneInfoNotFoundError):
        return None


def _unknown() -> None:
    raise NotImplementedError("a listing does not know the function")
