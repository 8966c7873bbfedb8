"""The mover: a running consumer adds the scheduled messages of its stream when they fall due.

Every running consumer of a topic runs one mover per partition stream (a task among its
services). Moving is one server-side script (:data:`streamq.publish.scheduling.MOVE_DUE`),
so several movers moving at once add each message once. Between moves a mover sleeps
until the next due time the script reported, never polling: a publish that schedules a
message earlier than every waiting one sends a notice on the sharded pub/sub channel
``streamq:{<stream>}:scheduled:wake``, which the mover follows and which wakes it. As a
safety net for a notice lost while its subscription was down (it is resubscribed, and a
resubscription wakes it too) or sent by a scheduler without the channel, it never
sleeps longer than :data:`MAX_SLEEP`. With no consumer running, messages wait.
"""

from __future__ import annotations

import logging

import anyio
import redis.asyncio as aioredis

from .._backoff import Backoff
from ..errors import RedisFailure, ServerUnavailableError
from ..publish.scheduling import MOVE_BATCH, Moved, move_due
from ..wire.damage import set_aside
from ..wire.keys import Keys
from ..wire.liveness import Liveness
from ..wire.records import DamagedRecord
from ..wire.translate import translated
from .stats import Stats

log = logging.getLogger(__name__)

MAX_SLEEP = 5.0  # the longest a mover sleeps without a notice (a notice may be lost)
FAILURE_BACKOFF = 0.5
MAX_FAILURE_BACKOFF = 10.0


class Mover:
    """Moves due scheduled messages of ``stream`` into it, for as long as it runs."""

    def __init__(self, client: aioredis.Redis, stream: str, consumer: str, stats: Stats) -> None:
        """``stats``: the consumer's, which counts what this mover adds and how late."""
        self._client = client
        self._stats = stats
        self._stream = stream
        self._name = f"streamq:mover:{consumer}"
        self._channel = Keys(stream).scheduled_wake
        self._wake = anyio.Event()

    def wake(self) -> None:
        """Move now (something may have fallen due earlier than the mover expected)."""
        self._wake.set()

    async def run(self) -> None:
        """Move, sleep until the next due time or a notice, again; until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._listen)
            await self._move_forever()

    async def _move_forever(self) -> None:
        backoff = Backoff(FAILURE_BACKOFF, MAX_FAILURE_BACKOFF)
        while True:
            self._wake = anyio.Event()  # a notice during the move makes the sleep short
            try:
                moved = await move_due(self._client, self._stream, self._name, MOVE_BATCH)
            except Exception as e:  # a loop that survives: its consumer goes on consuming
                delay = backoff.next()
                log.warning("could not move due scheduled messages of %s (again in %.1fs): %s",
                            self._stream, delay, e,
                            exc_info=not isinstance(e, RedisFailure))  # fmt: skip
                await anyio.sleep(delay)
                continue
            backoff.reset()
            self._count(moved)
            if moved.more_due:
                await anyio.lowlevel.checkpoint()
                continue
            with anyio.move_on_after(_sleep_for(moved)):
                await self._wake.wait()

    def _count(self, moved: Moved) -> None:
        self._stats.scheduled_moved += moved.moved
        self._stats.dead_lettered += len(moved.damaged)
        for late in moved.lateness:
            self._stats.scheduled_lateness.observe(late)
        key = Keys(self._stream).scheduled
        for scheduled_id in moved.damaged:
            expected = "a due time and a payload as streamq writes them"
            damaged = DamagedRecord("scheduled", key, scheduled_id, expected, "another")
            set_aside(damaged, "dead-lettered with the reason")

    async def _listen(self) -> None:
        """Follow the wake-up channel; every (re)subscription wakes the mover too, since
        notices sent while it was down are lost."""
        backoff = Backoff(FAILURE_BACKOFF, MAX_FAILURE_BACKOFF)
        while True:
            try:
                with translated(self._stream):
                    async with self._client.pubsub() as pubsub:
                        await pubsub.ssubscribe(self._channel)
                        backoff.reset()
                        self.wake()
                        await self._follow(pubsub)
            except Exception as e:  # the mover still wakes at least every MAX_SLEEP
                if not isinstance(e, RedisFailure):
                    log.exception("following the wake-up channel of %s failed", self._stream)
                log.debug("scheduled wake-up channel of %s lost: %s", self._stream, e)
                await anyio.sleep(backoff.next())

    async def _follow(self, pubsub: aioredis.client.PubSub) -> None:
        live = Liveness.of(pubsub)  # a half-open connection would never say it is gone
        while True:
            message = await pubsub.get_message(timeout=min(MAX_SLEEP, live.wait()))
            kind = None if message is None else message["type"]
            if kind == "sunsubscribe":  # the slot moved: subscribe again
                raise ServerUnavailableError("the server ended the wake-up subscription")
            if kind in ("smessage", "message"):
                self.wake()
            elif kind == "pong":
                live.answered()
            await live.check(pubsub)


def _sleep_for(moved: Moved) -> float:
    """Until the next due time by the server's clock, at most :data:`MAX_SLEEP`."""
    if moved.next_due is None:
        return MAX_SLEEP
    return min(max((moved.next_due - moved.now) / 1000, 0.0), MAX_SLEEP)
