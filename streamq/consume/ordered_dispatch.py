"""The outcome side of ordered consumption (and what the partitions of one ordered consumer
share, :class:`Shared`): fenced acks, and the verdicts a lane acts on.

:class:`FencedAcker` sends each ack through the fenced script (the ack is applied only
while this consumer holds the partition's lease with its token) and remembers which entries
were settled (acked or dead-lettered), so the lane knows whether to go on or retry in place.
:class:`LaneVerdicts` is where ordered mode's outcome policy
(:class:`~streamq.consume.outcomes.GroupOutcomes`, wired in :mod:`.ordered`) leaves what a
lane does next: a ``Retry(delay)`` retries in place after that delay instead of a later
re-claim, and with ``on_poison="halt"`` an entry past ``max_deliveries`` halts its key
instead of being dead-lettered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from ..config import ConsumerConfig, RetryPolicy
from ..errors import GroupNotFoundError, RedisFailure, StreamNotFoundError
from ..flow.gate import FlowGate
from ..message import RawEntry
from ..signals import Throttle
from ..topic.control import StoppedView
from ..wire import ownership as wire
from .acks import Acker
from .budget import Budget, Slots
from .outputs import Command, Output, OutputWriter, Staged
from .routes import Routes

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
        writer: OutputWriter | None = None,
    ) -> None:
        super().__init__(client, stream, group, writer)
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

    def ack_with(self, entry_id: str, outputs: Sequence[Output | Command]) -> None:
        self.settled.add(entry_id)
        super().ack_with(entry_id, outputs)

    async def ack_now(self, entry_id: str) -> None:
        """Send the ack of the settled ``entry_id`` now rather than with the next flush (an
        entry taken over from another owner: see :mod:`.handover`); on failure it stays
        queued."""
        staged = [one for one in self._staged if one[0] == entry_id]
        if staged:  # with its outputs: written with the ack, now
            self._staged.remove(staged[0])
            try:
                if await self._write(staged):
                    self.acked += 1
            except RedisFailure as e:
                log.warning("ack of %s on %s failed, queued again: %s", entry_id, self._stream, e)
                self._staged.append(staged[0])
                self._wakeup.set()
            return
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

    async def _write(self, staged: list[Staged]) -> bool:
        """Outputs and acks in one script, with the fencing check."""
        assert self._writer is not None
        fence = (wire.lease_key(self._stream, self._group), self._me, str(self._token))
        if await self._writer.write(staged, fence):
            return True
        log.warning("%d acks and their outputs refused on %s: the lease is lost", len(staged),
                    self._stream)  # fmt: skip
        self._on_lost()
        return False

    async def _xack(self, ids: list[str]) -> None:
        reply = await wire.fenced(
            self._client, self._stream, self._group, self._me, self._token, "ack", *ids
        )
        if reply is None:  # a stale owner's acks are refused: the next owner runs them again
            log.warning("%d acks refused on %s: the lease is lost", len(ids), self._stream)
            self._on_lost()


class LaneVerdicts:
    """What ordered mode's outcome policy decided for a lane's entries besides an ack: the
    delay a ``Retry(delay)`` asked for (its lane retries in place after it), or, with
    ``on_poison="halt"``, that its key halts (instead of a dead letter at the limit)."""

    def __init__(self, gate: FlowGate, types: set[str]) -> None:
        self._gate, self.types = gate, types  # types: every throttled type of the consumer
        self.delays: dict[str, float] = {}  # entry ID -> the delay its handler asked for
        self.halted: dict[str, str] = {}  # entry ID -> why its key halts
        self.throttled: dict[str, float] = {}  # entry ID -> seconds its key is held back

    def later(self, entry: RawEntry, delay: float) -> None:
        self.delays[entry.id] = delay

    def next_delay(self, entry: RawEntry, retry: RetryPolicy) -> float:
        """How long ``entry``'s key waits after its failure: the delay its handler asked
        for (``Retry(delay)``), else the policy's exponential backoff."""
        asked = self.delays.pop(entry.id, None)
        if asked is not None:
            return asked
        return float(min(retry.max_backoff, retry.backoff * 2 ** max(0, entry.delivery_count)))

    async def throttle(self, entry: RawEntry, signal: Throttle) -> None:
        """Its handler raised ``signal``: its key (or type) is held back in the group, and
        the entry runs again after that in its lane, its delivery not counted."""
        raw_key = entry.fields.get(b"key")
        key = None if raw_key is None else raw_key.decode("utf-8", "replace")
        self.throttled[entry.id] = await self._gate.throttle(entry.type or "", key, signal)
        self.types.add(entry.type or "")

    def halt(self, entry: RawEntry, reason: str, error: BaseException | None) -> None:
        self.halted[entry.id] = reason
        if error is not None:
            log.error("entry %s halts its key: %s", entry.id, reason, exc_info=error)


@dataclass(frozen=True, slots=True)
class Shared:
    """What the partitions of one ordered consumer share."""

    router: Routes
    config: ConsumerConfig
    retry: RetryPolicy
    slots: Slots  # handler slots: ``concurrency``
    room: Budget  # entries held: ``max_in_flight``
    valid: Callable[[int], bool]  # whether the lease of a partition still holds (local)
    on_gone: Callable[[GroupNotFoundError | StreamNotFoundError], None]
    stopped: Sequence[StoppedView]  # per partition: the stopped IDs the control channel told
    gate: FlowGate  # the group's pauses, rate limits and throttles
    throttled_types: set[str] = field(default_factory=set)  # types throttled here: checked
