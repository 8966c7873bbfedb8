"""The outcome side of ordered consumption (and what the partitions of one ordered consumer
share, :class:`Shared`): fenced acks and a dispatcher whose messages carry
the fencing token and whose failures stay with their key.

:class:`FencedAcker` sends each ack through the fenced script (the ack is applied only
while this consumer holds the partition's lease with its token) and remembers which entries
were settled (acked or dead-lettered), so the lane knows whether to go on or retry in place.
:class:`OrderedDispatcher` is the shared :class:`Dispatcher` with three differences: the
message carries ``fencing_token``, ``Retry(delay)`` is remembered for the lane instead of a
later re-claim, and with ``on_poison="halt"`` an entry past ``max_deliveries`` halts its key
instead of being dead-lettered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ..config import ConsumerConfig, RetryPolicy
from ..errors import GroupNotFoundError, RedisFailure, StreamNotFoundError
from ..message import Message, RawEntry
from ..topic.control import StoppedView
from ..wire import ownership as wire
from .acks import Acker
from .dispatch import Dispatcher
from .failures import describe
from .ordering import Room, Slots
from .routes import Route, Routes

log = logging.getLogger(__name__)


class FencedAcker(Acker):
    """Coalesced acks (as :class:`Acker`) sent through the fenced script."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        me: str,
        token: int,
        on_lost: Callable[[], None],
    ) -> None:
        super().__init__(client, stream, group)
        self._me, self._token, self._on_lost = me, token, on_lost
        self.settled: set[str] = set()

    def ack(self, entry_id: str) -> None:
        self.settled.add(entry_id)
        pending = self._pending  # Acker.ack, inlined: once per entry
        pending.append(entry_id)
        if len(pending) == 1:
            self._wakeup.set()

    def ack_many(self, entry_ids: list[str]) -> None:
        self.settled.update(entry_ids)
        super().ack_many(entry_ids)

    async def ack_now(self, entry_id: str) -> None:
        """Send the ack of the settled ``entry_id`` now rather than with the next flush (an
        entry taken over from another owner: see :mod:`.handover`); on failure it stays
        queued."""
        queued = entry_id in self._pending
        if queued:
            self._pending.remove(entry_id)
        try:
            await self._xack([entry_id])
        except RedisFailure as e:
            log.warning("ack of %s on %s failed, queued again: %s", entry_id, self._stream, e)
            if queued:
                Acker.ack(self, entry_id)
            return
        if queued:
            self.acked += 1

    async def _xack(self, ids: list[str]) -> None:
        reply = await wire.fenced(
            self._client, self._stream, self._group, self._me, self._token, "ack", *ids
        )
        if reply is None:  # a stale owner's acks are refused: the next owner runs them again
            log.warning("%d acks refused on %s: the lease is lost", len(ids), self._stream)
            self._on_lost()


class OrderedDispatcher(Dispatcher):
    def __init__(self, *, fencing_token: int, halt: bool, **kwargs: Any) -> None:
        self.retry_delays: dict[str, float] = {}
        self.halted: dict[str, str] = {}  # entry ID -> why its key halted
        super().__init__(schedule_retry=self._remember_delay, **kwargs)
        self.fencing_token = fencing_token
        self.halt = halt

    def _remember_delay(self, entry: RawEntry, delay: float) -> None:
        self.retry_delays[entry.id] = delay

    def message(self, route: Route, entry: RawEntry) -> Message[Any]:
        message = super().message(route, entry)
        message.fencing_token = self.fencing_token
        return message

    async def over_limit(self, entry: RawEntry) -> bool:
        if self.halt:  # the lane halts it instead (see halts_before_handling)
            return False
        return await super().over_limit(entry)

    async def halts_before_handling(self, entry: RawEntry) -> bool:
        """With ``on_poison="halt"``: an entry already past ``max_deliveries`` (its earlier
        owner halted on it, or crashed on it) halts its key without another call."""
        if not self.halt or entry.delivery_count <= self.retry.max_deliveries:
            return False
        attempts = await self.attempts(entry)
        if attempts <= self.retry.max_deliveries:
            return False
        self.halted[entry.id] = f"delivered {attempts} times (max {self.retry.max_deliveries})"
        return True

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool = False) -> None:
        if not self.halt:
            await super().failed(entry, error, outside=outside)
            return
        attempts = await self.attempts(entry)
        if attempts < self.retry.max_deliveries:
            await super().failed(entry, error, outside=outside)
            return
        self.stats.failed += 1
        reason = f"failed {attempts} deliveries; last error: {describe(error)}"
        self.halted[entry.id] = reason
        log.error("entry %s halts its key: %s", entry.id, reason, exc_info=error)


@dataclass(frozen=True, slots=True)
class Shared:
    """What the partitions of one ordered consumer share."""

    router: Routes
    config: ConsumerConfig
    retry: RetryPolicy
    slots: Slots  # handler slots: ``concurrency``
    room: Room  # entries held: ``max_in_flight``
    valid: Callable[[int], bool]  # whether the lease of a partition still holds (local)
    on_gone: Callable[[GroupNotFoundError | StreamNotFoundError], None]
    stopped: Sequence[StoppedView]  # per partition: the stopped IDs the control channel told
