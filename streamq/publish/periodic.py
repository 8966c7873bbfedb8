"""Periodic publishing: ``@mq.periodic("report", every=60)`` (or ``cron="*/5 * * * *"``)
publishes what the function returns, once per tick across every running process.

Ticks are instants every process computes alike: multiples of ``every`` seconds since the
Unix epoch, or the times a cron expression (parsed by ``cronsim``, in UTC) names. Every
running consumer of the queue (each ``mq.run()``, so each replica of a service) waits for
the next tick, then tries to claim it: ``SET streamq:{<topic>}:periodic:<name>:<tick ms>
NX PX <ttl>``. One claim succeeds; that process calls the function (a plain ``def`` runs
in a worker thread) and publishes its result, with ``meta["periodic_tick"]`` the tick's
time (ISO 8601). The last published tick is kept in the hash ``streamq:{<topic>}:periodic``
(for ``catch_up=True`` and for listings).

Ticks that passed while nothing ran are not made up (``catch_up=False``, the default);
with ``catch_up=True`` a process that starts publishes the ticks since the last one
published (at most :data:`MAX_CATCH_UP`), each still claimed once. A function that raises
skips its tick (logged); a process that dies between its claim and its publish loses that
tick: a tick is published at most once.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import redis.asyncio as aioredis
from cronsim import CronSim, CronSimError

from ..errors import ConfigError, MessageFormatError, RedisFailure
from ..message import validate_type_name
from ..wire.keys import Keys

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
MAX_CATCH_UP = 1000  # ticks one start makes up at most (catch_up=True)
MIN_CLAIM_TTL = 60.0  # a tick's claim outlives every process's view of that tick
MAX_CLAIM_TTL = 86400.0
FAILURE_BACKOFF = 1.0


@dataclass(frozen=True, slots=True)
class Periodic:
    """One periodic publisher: ``func`` gives the data of a ``message_type`` message per
    tick (``every`` seconds, or per ``cron`` expression)."""

    name: str
    message_type: str
    func: Callable[[], Any]
    every: float | None = None
    cron: str | None = None
    catch_up: bool = False
    key: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (Unix seconds)."""
        if self.every is not None:
            return (after // self.every + 1) * self.every
        assert self.cron is not None
        start = datetime.fromtimestamp(after, UTC).replace(microsecond=0)
        tick: datetime = next(CronSim(self.cron, start))
        if tick.timestamp() <= after:  # cronsim starts from the whole second
            tick = next(CronSim(self.cron, start + timedelta(seconds=1)))
        return tick.timestamp()

    def claim_ttl(self, tick: float) -> float:
        """How long a tick's claim is kept: two periods, within bounds."""
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
) -> Periodic:
    """A checked :class:`Periodic`; ConfigError naming what is wrong."""
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
    if cron is not None:
        _check_cron(cron)
    if not isinstance(catch_up, bool):
        raise ConfigError(f"catch_up must be True or False, got {catch_up!r}")
    label = name if name is not None else message_type
    if not isinstance(label, str) or not label or ":" in label:
        raise ConfigError(f"periodic name must be a non-empty string without ':', got {label!r}")
    every_s = None if every is None else float(every)
    return Periodic(label, message_type, func, every_s, cron, catch_up, key, dict(meta or {}))


def _check_cron(cron: object) -> None:
    if not isinstance(cron, str):
        raise ConfigError(f"cron must be a string such as '*/5 * * * *', got {cron!r}")
    try:
        next(CronSim(cron, datetime.now(UTC)))  # also: an expression that never matches
    except (CronSimError, StopIteration) as e:
        raise ConfigError(f"cron expression {cron!r} is not valid: {e}") from e


def claim_key(topic: str, name: str, tick: float) -> str:
    return f"{Keys(topic).prefix}periodic:{name}:{int(tick * 1000)}"


def record_key(topic: str) -> str:
    """Hash: periodic name -> the last tick published (Unix ms); ``<name>:spec`` -> what
    it publishes and when (JSON: type, every, cron), written by every process that runs
    it, for listings (:func:`streamq.publish.scheduled.periodic_publishers`)."""
    return Keys(topic).periodic


def spec_of(periodic: Periodic) -> str:
    return json.dumps({"type": periodic.message_type, "every": periodic.every,
                       "cron": periodic.cron})  # fmt: skip


def from_spec(name: str, spec: str) -> Periodic | None:
    """The Periodic a listing reads back (its function is not known there); None if the
    spec is not one streamq wrote."""
    try:
        fields = json.loads(spec)
        every, cron = fields.get("every"), fields.get("cron")
        return Periodic(name, str(fields["type"]), _unknown, every, cron)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _unknown() -> None:
    raise NotImplementedError("a listing does not know the function")


Publish = Callable[[Periodic, Any, str], Awaitable[object]]


class PeriodicRunner:
    """Runs a queue's periodic publishers while its consumer runs."""

    def __init__(
        self, client: aioredis.Redis, topic: str, owner: str, periodics: list[Periodic],
        publish: Publish,
    ) -> None:  # fmt: skip
        self._client, self._topic, self._owner = client, topic, owner
        self._periodics, self._publish = periodics, publish
        self.published = 0

    async def run(self) -> None:
        await self._announce()
        async with anyio.create_task_group() as tg:
            for periodic in self._periodics:
                tg.start_soon(self._run_guarded, periodic)

    async def _run_guarded(self, periodic: Periodic) -> None:
        """One publisher; a bug in it ends it, logged, never the queue's consumer."""
        try:
            await self._run_one(periodic)
        except Exception:
            log.exception("periodic %s stopped: it will not publish again in this process",
                          periodic.name)  # fmt: skip

    async def _run_one(self, periodic: Periodic) -> None:
        last = await self._last_published(periodic) if periodic.catch_up else None
        while True:
            now = time.time()
            if last is None:
                tick = periodic.next_tick(now)
            else:  # catch_up: the tick after the last published, even if it passed
                tick = _first_to_make_up(periodic, last, now)
            await _sleep_until(tick)  # at once for a tick that passed
            await self._take(periodic, tick)
            if periodic.catch_up:
                last = tick

    async def _announce(self) -> None:
        """Record each publisher's spec, for listings (best effort)."""
        specs = {f"{p.name}:spec": spec_of(p) for p in self._periodics}
        try:
            await self._client.hset(record_key(self._topic), mapping=specs)
        except RedisFailure as e:
            log.warning("could not record the periodic publishers of %s: %s", self._topic, e)

    async def _last_published(self, periodic: Periodic) -> float | None:
        try:
            raw = await self._client.hget(record_key(self._topic), periodic.name)
        except RedisFailure as e:
            log.warning("periodic %s: could not read its last tick: %s", periodic.name, e)
            return None
        return None if raw is None else int(raw) / 1000

    async def _take(self, periodic: Periodic, tick: float) -> None:
        """Claim ``tick``; publish it if this process won the claim."""
        try:
            won = await self._client.set(
                claim_key(self._topic, periodic.name, tick), self._owner, nx=True,
                px=int(periodic.claim_ttl(tick) * 1000),
            )  # fmt: skip
        except RedisFailure as e:
            log.warning("periodic %s: could not claim tick %s: %s", periodic.name, tick, e)
            await anyio.sleep(FAILURE_BACKOFF)
            return
        if won:
            await self._publish_tick(periodic, tick)

    async def _publish_tick(self, periodic: Periodic, tick: float) -> None:
        at = datetime.fromtimestamp(tick, UTC).isoformat(timespec="milliseconds")
        try:
            data = await _call(periodic.func)
            await self._publish(periodic, data, at)
            await self._client.hset(record_key(self._topic), periodic.name, int(tick * 1000))
        except Exception:
            log.exception("periodic %s: tick %s not published", periodic.name, at)
            return
        self.published += 1


def _first_to_make_up(periodic: Periodic, last: float, now: float) -> float:
    """The tick after ``last``, or, if more than MAX_CATCH_UP ticks passed since, the
    first of the last MAX_CATCH_UP (logged)."""
    tick = periodic.next_tick(last)
    if periodic.every is not None:
        first = periodic.next_tick(now - MAX_CATCH_UP * periodic.every)
    else:
        passed: list[float] = []
        probe = tick
        while probe <= now and len(passed) < 100 * MAX_CATCH_UP:
            passed.append(probe)
            probe = periodic.next_tick(probe)
        first = passed[-MAX_CATCH_UP] if len(passed) > MAX_CATCH_UP else tick
    if first > tick:
        log.warning("periodic %s: more than %d ticks missed; making up the last %d",
                    periodic.name, MAX_CATCH_UP, MAX_CATCH_UP)  # fmt: skip
        return first
    return tick


async def _call(func: Callable[[], Any]) -> Any:
    if inspect.iscoroutinefunction(func):
        return await func()
    result = await anyio.to_thread.run_sync(func)
    return await result if inspect.isawaitable(result) else result


async def _sleep_until(when: float) -> None:
    """Sleep until the wall clock reads ``when`` (the event loop's clock may drift)."""
    # not an Event: the wait is for a time, re-checked because the loop's clock is not the
    # wall clock the ticks are reckoned in
    while (left := when - time.time()) > 0:  # noqa: ASYNC110
        await anyio.sleep(left)


def add_periodic(owner: object, periodic: Periodic) -> None:
    """Register ``periodic`` on ``owner`` (a queue or a :class:`streamq.Router`); a name
    registered there already is a ConfigError."""
    registered: list[Periodic] = owner.__dict__.setdefault("_periodics", [])
    if any(p.name == periodic.name for p in registered):
        raise ConfigError(
            f"a periodic publisher named {periodic.name!r} is registered already: "
            "give the second one its own name="
        )
    registered.append(periodic)


class PeriodicRegistry:
    """``@periodic(...)``: the periodic publishers registered on a queue or a Router."""

    @property
    def periodics(self) -> tuple[Periodic, ...]:
        """The periodic publishers registered on this queue."""
        return tuple(self.__dict__.get("_periodics", ()))

    def periodic(
        self,
        message_type: str,
        *,
        every: float | timedelta | None = None,
        cron: str | None = None,
        catch_up: bool = False,
        name: str | None = None,
        key: str | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> Callable[[F], F]:
        """Publish what the decorated function returns as a ``message_type`` message once
        per tick, across every running process of this queue.

        ``every`` (seconds or timedelta: ticks at its multiples since the Unix epoch) or
        ``cron`` (a 5-field cron expression, UTC). ``catch_up``: make up the ticks missed
        while nothing ran. ``name`` (default: the type) identifies it across processes:
        two periodic publishers of one type need two names. ``key``, ``meta``: as for
        :meth:`publish`. The function takes no argument (plain ``def`` or ``async def``);
        it runs only in a process whose consumer runs (``mq.run()``, an App).

        Raises ConfigError (at registration) for a bad expression, neither or both of
        ``every``/``cron``, a name used twice.
        """

        def register(func: F) -> F:
            periodic = make_periodic(
                message_type, func, every=every, cron=cron, catch_up=catch_up, name=name,
                key=key, meta=meta,
            )  # fmt: skip
            add_periodic(self, periodic)
            return func

        return register


class PeriodicPublishing(PeriodicRegistry):
    """``@mq.periodic(...)`` and the running of a queue's periodic publishers (part of
    :class:`streamq.MessageQueue`)."""

    stream: str
    consumer: str

    @property
    def client(self) -> aioredis.Redis:
        raise NotImplementedError

    async def publish(
        self, message_type: str, data: Any, meta: Mapping[str, str] | None = None, *,
        key: str | bytes | None = None,
    ) -> str:  # fmt: skip
        raise NotImplementedError

    async def run_periodics(self) -> None:
        """Run this queue's periodic publishers (MessageQueue.run does, with the consumer)."""

        async def publish(periodic: Periodic, data: Any, tick: str) -> object:
            meta = {**periodic.meta, "periodic_tick": tick}
            return await self.publish(periodic.message_type, data, meta, key=periodic.key)

        owner = f"{self.consumer}@{time.time():.3f}"
        await PeriodicRunner(self.client, self.stream, owner, list(self.periodics), publish).run()
