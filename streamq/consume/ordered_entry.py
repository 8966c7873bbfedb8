"""How a lane of an owned partition runs one entry in ordered mode (the ``run_entry`` of
:class:`~.ordering.KeyedLanes`), until the entry is settled or its key has to wait.

In order: what an operator asked for it (stopped, resumed, its halted key released); the
rest of a wait it began under an earlier owner (:mod:`.waits`); flow control (paused,
throttled, over its rate limit: :mod:`.lane_flow`); then deliveries. A failed delivery is
retried in place: its key waits out the backoff (or the delay a ``Retry`` asked for), the
wait recorded for a next owner, and the entry is delivered again (counted by Redis: a
fenced ``XCLAIM`` to itself). With ``on_poison="halt"``, an entry past ``max_deliveries``
halts its key instead of being dead-lettered.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import anyio

from ..errors import RedisFailure
from ..logs import ENTRY
from ..message import RawEntry
from .dispatch import Dispatcher
from .failures import describe
from .halting import HaltedKeys
from .holding import StoppedHolds
from .lane_flow import lane_wait
from .ordered_dispatch import FencedAcker, LaneVerdicts, Shared
from .ordering import KeyedLanes, Later
from .timing import READ_ERROR_BACKOFF
from .waits import RecordedWaits

log = logging.getLogger(__name__)


class Partition(Protocol):
    """What an entry's run needs of the partition that owns it
    (:class:`~.ordered_partition.PartitionWorker`)."""

    stream: str
    draining: bool  # moved away or stopping: nothing more starts
    taken: set[str]  # taken over from another owner, not yet settled
    lanes: KeyedLanes | None
    shared: Shared
    acker: FencedAcker
    dispatcher: Dispatcher
    verdicts: LaneVerdicts
    holds: StoppedHolds
    halted: HaltedKeys
    waits: RecordedWaits

    def may_act(self) -> bool: ...
    def abandon(self) -> None: ...
    async def fenced(
        self, op: str, *args: str | int | bytes, pooled: bool = False
    ) -> list[Any]: ...


class EntryRun:
    """The runs of one partition's entries in their lanes."""

    def __init__(self, partition: Partition) -> None:
        self._p = partition
        self._again: set[str] = set()  # failed, waiting out their backoff: redeliver first

    def ran(self, entry_id: str) -> bool:
        """Whether ``entry_id`` failed here and waits to run again (its delivery ran)."""
        return entry_id in self._again

    async def safely(self, entry: RawEntry) -> bool | Later:
        """:meth:`run`; an error outside the handler (the server away while an entry is
        held or halted, a bug) gives the partition up: the next tick takes it again with a
        new token and takes over its pending entries, so no entry is skipped."""
        p = self._p
        try:
            go_on = await self.run(entry)
            if go_on is True and entry.id in p.taken:  # settled: acked before it goes on
                p.taken.discard(entry.id)
                lanes = p.lanes
                if lanes is not None and lanes.behind(entry.fields.get(b"key")):
                    await p.acker.ack_now(entry.id)
            if go_on is True:
                await p.waits.over(entry.id)
                await p.halted.settled(entry.id)
        except Exception as e:
            log.error("partition %s: giving it up after an error at entry %s: %s",
                      p.stream, entry.id, describe(e), exc_info=e)  # fmt: skip
            p.abandon()
            return False
        if go_on is False and not p.draining and not p.may_act():
            # the lease lapsed by the local clock (the loop was late to renew it): give the
            # partition up, as a lost lease. Were it renewed a moment later, this stopped
            # lane would hold its key and its entries' room for good.
            p.abandon()
        return go_on

    async def run(self, entry: RawEntry) -> bool | Later:
        """Handle ``entry`` until it is settled (acked or dead-lettered): True, its lane goes
        on; False if the partition stops here (lost, draining) or its key halted; Later
        when it failed: it is delivered again after its backoff (its key waits meanwhile)."""
        p = self._p
        holds = p.holds  # stopped when read or while it waited in its lane, resumed, or
        if holds.flagged or holds.view.ids or holds.resumed or p.halted.released:  # released
            decided = await self._operator_action(entry)
            if decided is not None:
                return decided
        left = p.waits.left(entry.id)
        if left is not None:  # it failed with an earlier owner: the rest of its wait
            return Later(left)
        waits = await lane_wait(p.shared, p.dispatcher, entry, p.stream)
        if waits is not None:  # paused, throttled or over its rate limit: its key waits, in order
            return waits
        while not p.draining and p.may_act():
            try:
                outcome = await self._attempt(entry)
            except RedisFailure as e:  # the server is away: try again after a pause
                log.warning("partition %s: %s waits for the server: %s", p.stream, entry.id, e)
                await anyio.sleep(READ_ERROR_BACKOFF)
                continue
            if outcome is not None:
                return outcome
        return False

    async def _operator_action(self, entry: RawEntry) -> bool | None:
        """What an operator asked for ``entry`` (it was stopped, resumed, or its halted key
        released): True or False as :meth:`run` returns, None to handle it now."""
        p = self._p
        holds = p.holds
        if (entry.id in holds.flagged or entry.id in holds.view.ids) and await holds.hold(entry):
            return False  # stopped: its key waits until it is resumed
        if entry.id in holds.resumed:
            holds.resumed.discard(entry.id)
            self._again.discard(entry.id)  # the resume delivers it again
            count = entry.delivery_count  # the resume gave it back with its count less one:
            if not await self.redeliver(entry, fresh=False):  # this delivery makes it whole
                return not p.draining and p.may_act()  # deleted: the key goes on
            entry.delivery_count = count
        action = p.halted.released.pop(entry.id, None)
        halted_for = p.halted.reasons.pop(entry.id, None) if action else None
        if action == "skip":
            why = f": {halted_for}" if halted_for else ""
            await p.dispatcher.outcomes.dead_letter(
                entry, f"skipped by an operator after its key halted{why}"
            )
            p.acker.settled.discard(entry.id)
            return True
        if action == "retry" and not await self.redeliver(entry, fresh=True):
            return not p.draining and p.may_act()
        return None

    async def _attempt(self, entry: RawEntry) -> bool | Later | None:
        """One delivery of ``entry``: True (settled), False (its key halted), Later (failed:
        delivered again after its backoff), None (the server was away: try it again)."""
        p = self._p
        if self._again and entry.id in self._again:  # its backoff is over: deliver it again
            again = await self.redeliver(entry, fresh=False)
            self._again.discard(entry.id)
            if not again:
                return not p.draining and p.may_act()  # deleted: the key goes on
        # past max_deliveries (an earlier owner halted or crashed on it): its key halts or
        # it is dead-lettered, whatever its type, without another call
        past_limit = entry.delivery_count > 1 and await p.dispatcher.outcomes.past_limit(entry)
        if not past_limit:
            await self._deliver(entry)
        if entry.id in p.acker.settled:
            p.acker.settled.discard(entry.id)
            return True
        halted = p.verdicts.halted.pop(entry.id, None)
        if halted is not None:
            await p.halted.halt(entry, halted)
            await p.waits.over(entry.id)
            return False
        throttled = p.verdicts.throttled.pop(entry.id, None)
        if throttled is not None:  # runs again after it, as it is: no delivery counted
            return Later(max(throttled, 0.001), "throttle")
        self._again.add(entry.id)
        delay = p.verdicts.next_delay(entry, p.shared.retry)
        await p.waits.record(entry.id, delay)
        return Later(delay)

    async def _deliver(self, entry: RawEntry) -> None:
        p = self._p
        route = p.shared.router.by_type_field.get(entry.fields.get(b"type", b""))
        ENTRY.set(entry)  # the log context of handle_one
        try:
            await p.dispatcher.handle_one(route, entry)
        except RedisFailure as e:
            log.error("could not record the outcome of %s (retried in place): %s", entry.id, e)
        except Exception as e:  # a bug in streamq: the entry is retried, the lane lives
            log.error("processing %s failed (retried in place): %s", entry.id, describe(e),
                      exc_info=e)  # fmt: skip

    async def redeliver(self, entry: RawEntry, *, fresh: bool) -> bool:
        """Deliver ``entry`` again to this consumer (counted by Redis; ``fresh``: the count
        starts over, an operator released its halted key). False if it cannot be: the
        partition is draining, or the entry was deleted or acked meanwhile; the lease lost,
        the partition is given up (this run is cancelled)."""
        p = self._p
        if p.draining or not p.may_act():
            return False
        reply = await p.fenced("redeliver", entry.id, 1 if fresh else 0, pooled=True)
        rows = reply[1]
        if not rows or not rows[0]:
            return False
        entry.delivery_count = 1 if fresh else entry.delivery_count + 1
        return True
