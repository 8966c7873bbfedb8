"""Running periodic publishers: exactly one message per tick across every running process.

Every process that runs a queue's periodic publishers (each ``mq.run()``, so each replica
of a service, or ``mq.run_periodics()``) waits for each publisher's next tick, then tries
to claim it (:mod:`streamq.publish.ticks`): one process wins a lease on the tick, calls the
function (a plain ``def`` runs in a worker thread), and publishes its result, with
``meta["periodic_tick"]`` the tick's time (ISO 8601, UTC), through the queue's model check
and publish middlewares; the entry is then written by a server-side script that adds it
and marks the tick done in one step, so a tick is never published twice.

The winner renews its lease while it works. A process that dies between its claim and its
publish (killed, its machine lost) stops renewing: once the lease runs out (``lease``
seconds, :data:`CLAIM_LEASE`), any running process of the queue finds the tick among the
open ones, takes it, calls the function and publishes the message. So a tick is published
once as long as a process of the queue runs within the tick's window (two periods, at
least a minute); a process that starts looks at the open ticks at once.

Ticks that passed while nothing ran are not made up (``catch_up=False``, the default);
with ``catch_up=True`` a process that starts publishes the ticks since the last one
published (at most :data:`MAX_CATCH_UP`), each still once. A function that raises skips
its tick (logged); so does a publish a middleware drops or the model check refuses.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..topic.partitions import partition_for_key
from . import ticks
from .periodic import Periodic, periodic_levels, record_key, spec_of
from .ticks import Published

if TYPE_CHECKING:
    from ..topic.handle import TopicHandle

log = logging.getLogger(__name__)

CLAIM_LEASE = 5.0  # seconds a claim holds a tick unless renewed; a dead claimer's tick
#                    is taken over once it runs out
MAX_CATCH_UP = 1000  # ticks one start makes up at most (catch_up=True)
FAILURE_BACKOFF = 1.0
RESCUE_MARGIN = 0.05  # after a lease's end, before taking its tick over

Place = tuple[aioredis.Redis, str]  # the client and the stream a publisher's ticks go to
Publish = Callable[[Periodic, Any, int], Awaitable[Published]]
PublishIn = Callable[[Periodic, Any, int, int], Awaitable[Published]]  # in a partition


def tick_time(tick_ms: int) -> str:
    """A tick as ``meta["periodic_tick"]`` carries it: ISO 8601, UTC, milliseconds."""
    return datetime.fromtimestamp(tick_ms / 1000, UTC).isoformat(timespec="milliseconds")


class PeriodicRunner:
    """Runs a queue's periodic publishers while its consumer runs.

    ``place`` gives the client and stream of a publisher's ticks; ``publish`` publishes the
    data of a tick (Unix ms) once, with its claim. ``lease``: :data:`CLAIM_LEASE` if None.
    """

    def __init__(
        self, client: aioredis.Redis, topic: str, owner: str, periodics: list[Periodic],
        place: Callable[[Periodic], Place], publish: Publish, *, lease: float | None = None,
    ) -> None:  # fmt: skip
        self._client, self._topic, self._owner = client, topic, owner
        self._periodics, self._place, self._publish = periodics, place, publish
        self._lease = CLAIM_LEASE if lease is None else lease
        self.published = 0

    async def run(self) -> None:
        await self._announce()
        by_stream: dict[str, tuple[aioredis.Redis, dict[str, Periodic]]] = {}
        for periodic in self._periodics:
            client, stream = self._place(periodic)
            by_stream.setdefault(stream, (client, {}))[1][periodic.name] = periodic
        async with anyio.create_task_group() as tg:
            for periodic in self._periodics:
                tg.start_soon(self._guarded, partial(self._run_one, periodic), periodic.name)
            for stream, (client, named) in by_stream.items():
                rescue = partial(self._rescue_forever, client, stream, named)
                tg.start_soon(self._guarded, rescue, f"take-over of {stream}'s open ticks")

    async def _guarded(self, run: Callable[[], Awaitable[None]], what: str) -> None:
        """One loop; a bug in it ends it, logged, never the queue's consumer."""
        try:
            await run()
        except Exception:
            log.exception("periodic %s stopped: it will not run again in this process", what)

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
        client, stream = self._place(periodic)
        try:
            last = await ticks.last_published(client, stream, periodic.name)
        except RedisFailure as e:
            log.warning("periodic %s: could not read its last tick: %s", periodic.name, e)
            return None
        return None if last is None else last / 1000

    async def _claim(self, periodic: Periodic, tick_ms: int, mode: ticks.Mode) -> ticks.Claim:
        client, stream = self._place(periodic)
        window = periodic.claim_ttl(tick_ms / 1000)
        return await ticks.claim_tick(
            client, stream, periodic.name, tick_ms, mode=mode, owner=self._owner,
            lease=self._lease, window=window,
        )  # fmt: skip

    async def _take(self, periodic: Periodic, tick: float) -> None:
        """Claim ``tick``; publish it if this process won the claim."""
        tick_ms = round(tick * 1000)
        try:
            claim = await self._claim(periodic, tick_ms, "new")
        except RedisFailure as e:  # if the claim was made, its lease runs out: rescued
            log.warning("periodic %s: could not claim tick %s: %s", periodic.name,
                        tick_time(tick_ms), e)  # fmt: skip
            await anyio.sleep(FAILURE_BACKOFF)
            return
        if claim.held:
            await self._finish(periodic, tick_ms)

    async def _finish(self, periodic: Periodic, tick_ms: int) -> None:
        """Call the function and publish the tick, renewing the claim's lease meanwhile."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew, periodic, tick_ms)
            try:
                await self._call_and_publish(periodic, tick_ms)
            finally:
                tg.cancel_scope.cancel()

    async def _call_and_publish(self, periodic: Periodic, tick_ms: int) -> None:
        at = tick_time(tick_ms)
        try:
            data = await _call(periodic.func)
            published = await self._publish(periodic, data, tick_ms)
        except RedisFailure as e:
            log.warning("periodic %s: tick %s not published yet: %s; it will be once its "
                        "claim runs out (%gs), by a running process of the queue",
                        periodic.name, at, e, self._lease)  # fmt: skip
            return
        except Exception:
            log.exception("periodic %s: tick %s not published", periodic.name, at)
            await self._skip(periodic, tick_ms)
            return
        if published.added:
            self.published += 1
            await self._note_for_listings(periodic, tick_ms)
        elif published.entry_id is None:
            log.warning("periodic %s: tick %s not published: its claim was given up, or "
                        "outlived its window", periodic.name, at)  # fmt: skip
            await self._skip(periodic, tick_ms)

    async def _renew(self, periodic: Periodic, tick_ms: int) -> None:
        while True:
            await anyio.sleep(self._lease / 3)
            try:
                claim = await self._claim(periodic, tick_ms, "renew")
            except RedisFailure as e:
                log.debug("periodic %s: lease not renewed: %s", periodic.name, e)
                continue
            if not claim.held:  # taken over or finished: the publish script decides
                return

    async def _skip(self, periodic: Periodic, tick_ms: int) -> None:
        """Give up a tick this process holds: no other process publishes it."""
        try:
            await self._claim(periodic, tick_ms, "skip")
        except RedisFailure as e:
            log.warning("periodic %s: could not give up tick %s: %s (another process may "
                        "try it)", periodic.name, tick_time(tick_ms), e)  # fmt: skip

    async def _note_for_listings(self, periodic: Periodic, tick_ms: int) -> None:
        """The last tick where listings read it: the topic's record (the publish script
        wrote it already when the ticks go to the topic's own stream)."""
        if self._place(periodic)[1] == self._topic:
            return
        try:
            await self._client.hset(record_key(self._topic), periodic.name, tick_ms)
        except RedisFailure as e:
            log.debug("periodic %s: last tick not recorded for listings: %s", periodic.name, e)

    async def _rescue_forever(
        self, client: aioredis.Redis, stream: str, named: dict[str, Periodic]
    ) -> None:
        """Take over the ticks of ``stream`` (of the publishers ``named`` here) whose claimer
        stopped renewing its lease, and finish them; look again when the first lease seen
        ends (at most ``lease`` s)."""
        async with anyio.create_task_group() as tg:
            while True:
                wait = self._lease
                try:
                    for name, tick_ms in await ticks.open_ticks(client, stream, set(named)):
                        claim = await self._claim(named[name], tick_ms, "rescue")
                        if claim.held:
                            log.warning("periodic %s: publishing tick %s, claimed by a process "
                                        "that stopped before publishing it",
                                        name, tick_time(tick_ms))  # fmt: skip
                            tg.start_soon(self._finish, named[name], tick_ms)
                        elif not claim.finished:
                            wait = min(wait, claim.wait)
                except RedisFailure as e:
                    log.warning("periodic publishers of %s: could not look at open ticks: %s",
                                stream, e)  # fmt: skip
                    wait = FAILURE_BACKOFF
                await anyio.sleep(wait + RESCUE_MARGIN)


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


def tick_partition(periodic: Periodic, partitions: int) -> int:
    """The partition of a publisher's ticks: its key's, else its name's (every process
    must pick the same: a tick's claim lives there)."""
    if partitions == 1:
        return 0
    return partition_for_key(periodic.key or periodic.name, partitions)


async def run_periodics(
    topic: TopicHandle, consumer: str, periodics: Sequence[Periodic], publish_tick: PublishIn
) -> None:
    """Run the ``periodics`` of a queue on ``topic`` whose consumer is ``consumer``;
    ``publish_tick`` publishes a tick's data in the partition given, with its claim,
    through the model check and the publish middlewares (``CheckedPublishing``)."""

    levels = periodic_levels(periodics, topic.priorities)

    def stream_of(periodic: Periodic) -> int:  # its partition, in its level
        return levels[periodic.name] * topic.partitions + tick_partition(periodic, topic.partitions)

    def place(periodic: Periodic) -> Place:
        stream = topic.streams[stream_of(periodic)]
        return topic.client_for(stream), stream

    async def publish(periodic: Periodic, data: Any, tick_ms: int) -> Published:
        return await publish_tick(periodic, data, tick_ms, stream_of(periodic))

    owner = f"{consumer}@{uuid.uuid4().hex[:12]}"
    runner = PeriodicRunner(topic.client, topic.stream, owner, list(periodics), place, publish)
    await runner.run()
