"""One partition owned by an ordered consumer, for as long as it holds the lease.

Takeover first: the partition's whole pending list, of every consumer, is claimed to this
one (fenced ``XAUTOCLAIM ... 0``, page by page in ID order) and fed to the keyed lanes with
the entries a stop holds for the group (:mod:`.handover`: which claims count a delivery);
then new entries are read (fenced ``XREADGROUP ... >``; when nothing is new, a side-effect
free ``XREAD BLOCK`` waits from the stream's last ID). Each entry runs in its key's lane
(:mod:`.ordered_entry`): handled, then acked through the fenced acker; a failure is retried
in place (only its key waits), each retry a redelivery counted by Redis.

Two ways to end: :meth:`drain` (moved away or stopping: stop reading, finish running
entries within ``grace``, flush the acks; the caller releases the lease) and :meth:`abandon`
(the lease lapsed: stop at once, the next owner takes the pending entries)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import anyio
import redis.asyncio as aioredis

from .._ids import StreamId, after
from ..errors import GroupNotFoundError, RedisFailure, ServerUnavailableError, StreamNotFoundError
from ..message import RawEntry
from ..wire import ownership as wire
from ..wire import replies, resp
from ..wire.replies import text
from .claiming import delivery_counts
from .dispatch import Dispatcher
from .gone import xread_block
from .halting import HaltedKeys
from .handover import Handover
from .holding import StoppedHolds
from .ordered_dispatch import FencedAcker, LaneVerdicts, Shared
from .ordered_entry import EntryRun
from .ordering import KeyedLanes, per_key_share
from .outputs import OutputWriter
from .refill import PendingRefill
from .timing import ACK_FLUSH_TIMEOUT, READ_ERROR_BACKOFF
from .waits import RecordedWaits

log = logging.getLogger(__name__)


class PartitionWorker:
    """One partition this consumer owns with the lease's fencing ``token``: its source
    (takeover, then reads), its lanes and its fenced acks."""

    def __init__(
        self,
        index: int,
        stream: str,
        group: str,
        me: str,
        token: int,
        client: aioredis.Redis,
        shared: Shared,
        make_dispatcher: Callable[[FencedAcker, int, LaneVerdicts], Dispatcher],
        writer: OutputWriter | None = None,
    ) -> None:
        self.index, self.stream, self.group, self.me, self.token = index, stream, group, me, token
        self._last_added = StreamId(0, 0)  # the highest entry ID given to the lanes
        self.taken: set[str] = set()  # taken over from another owner, not yet settled
        self.claimed = 0  # pending entries taken over (mq.stats()["claimed"])
        self._client, self.shared = client, shared
        self.acker = FencedAcker(client, stream, group, me, token, self.abandon, writer)
        self._connection = resp.OwnConnection(client)  # the read loop's, for its life
        self.verdicts = LaneVerdicts(shared.gate, shared.throttled_types)
        self.dispatcher = make_dispatcher(self.acker, token, self.verdicts)
        self.halted = HaltedKeys(client, stream, group)
        self.holds = StoppedHolds(client, stream, group, shared.stopped[index])
        self.refill = PendingRefill(functools.partial(self.fenced, pooled=True),
                                    lambda: self._last_added, self.abandon, stream,
                                    self.holds.flagged.update)  # fmt: skip
        self.waits = RecordedWaits(functools.partial(self.fenced, pooled=True),
                                   wire.lease_key(stream, group))  # fmt: skip
        self.lost, self.draining = False, False  # lost: the lease lapsed or an op was refused
        self._scope = anyio.CancelScope()  # everything of this partition
        self._read_scope = anyio.CancelScope()
        self.lanes: KeyedLanes | None = None
        self._entries = EntryRun(self)
        self.done = anyio.Event()
        self._acks_done = anyio.Event()

    def may_act(self) -> bool:
        return not self.lost and self.shared.valid(self.index)

    def abandon(self) -> None:
        """Stop at once: the lease is gone (nothing more is handled or acked here)."""
        if not self.lost:
            log.warning("partition %s: lease lost, stopping at once", self.stream)
        self.lost = True
        self._scope.cancel()

    def drain(self) -> None:
        """Stop reading; running entries finish (within ``grace``), then :meth:`run` ends."""
        self.draining = True
        self._read_scope.cancel()

    async def run(self) -> None:
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    lanes = self.lanes = KeyedLanes(
                        tg,
                        self._entries.safely,
                        self.shared.slots,
                        self.shared.room,
                        per_key_share(self.shared.config),
                        functools.partial(self.holds.set_aside, give_up=self.abandon),
                        self.refill,
                    )
                    tg.start_soon(self._run_acker)
                    tg.start_soon(self.halted.watch, lanes, self.may_act)
                    tg.start_soon(self.holds.watch, lanes, self.may_act)
                    with self._read_scope:
                        await self._takeover(lanes)
                        await self._read_loop(lanes)
                    await self._finish(lanes)
                    tg.cancel_scope.cancel()
        finally:
            if self.lanes is not None:
                self.lanes.drop_all()
            await self._connection.release()
            self.done.set()

    async def _finish(self, lanes: KeyedLanes) -> None:
        """Draining: running entries finish within ``grace``; then the acks are flushed."""
        with anyio.move_on_after(self.shared.config.grace):
            await lanes.wait_idle()
        if lanes.held:
            log.info("partition %s: %d entries left pending for the next owner",
                     self.stream, lanes.held)  # fmt: skip
            await self._give_back_unrun(lanes)
        lanes.drop_all()
        self.acker.close()  # the acker returns once every ack was sent, a flush under way too
        with anyio.move_on_after(ACK_FLUSH_TIMEOUT):
            await self._acks_done.wait()
        if self.acker.backlog:
            log.warning("partition %s: %d acks not sent; the next owner runs those entries again",
                        self.stream, self.acker.backlog)  # fmt: skip

    async def _give_back_unrun(self, lanes: KeyedLanes) -> None:
        """Leaving the partition, take back the delivery its read or claim counted of each
        key's first entry that did not run here: waiting (paused, throttled, over its rate
        limit, out a wait begun under an earlier owner) or not reached. The next owner's
        takeover counts it again (it keeps the count of each key's first pending entry, as
        it may have been running), so an entry that only waited is not counted, however
        often its partition moves. Entries that ran (failed, waiting to run again; halted)
        keep their count."""
        halted = self.halted.entry_ids()
        back: list[str | int] = []
        for entry in lanes.idle_heads():
            if (
                entry.delivery_count > 0
                and not self._entries.ran(entry.id)
                and entry.id not in halted
            ):
                back += [entry.id, entry.delivery_count - 1]
        if not back or not self.may_act():
            return
        try:
            await wire.fenced(self._client, self.stream, self.group, self.me, self.token,
                              "recount", *back)  # fmt: skip
        except RedisFailure as e:  # they are counted once more
            log.warning("partition %s: deliveries not given back: %s", self.stream, e)

    async def _run_acker(self) -> None:
        try:
            await self.acker.run()
        finally:
            self._acks_done.set()

    # -- reading --------------------------------------------------------------------
    async def _takeover(self, lanes: KeyedLanes, start: str = "0-0") -> None:
        """Claim the partition's pending entries of every consumer, in ID order, first
        (from ``start``: after a lost read, only those past what the lanes were given)."""
        room = self.shared.room
        handover = await self._handover(start)
        while not self.draining:
            await room.wait_for_room()
            count = min(self.shared.config.claim_count, max(room.room(), 1))
            room.reserve(count)  # held while the claim is on the wire (see _read_loop)
            try:
                reply = await self.fenced("claim", start, count)
                entries = replies.entries([row for row in reply[2] if row and row[1]])
                if entries:
                    counts = await delivery_counts(
                        self._client, self.stream, self.group, self.me, [e.id for e in entries]
                    )
                    for entry in entries:
                        entry.delivery_count = counts.get(entry.id, 1)
                    self.waits.met(entries)
                    if not handover.lost_read:  # acked as soon as settled (see .handover)
                        self.taken.update(entry.id for entry in entries)
                        self.claimed += len(entries)
                    recount = handover.recount(entries)
                    if recount:  # deliveries the claim counted that could not have run
                        await self.fenced("recount", *recount)
            finally:
                room.release(count)
            start = text(reply[1])
            if entries:
                log.info("partition %s: taking over %d pending entries (token %d)",
                         self.stream, len(entries), self.token)  # fmt: skip
            entries = handover.merge(entries, last=start == "0-0")
            if entries:
                self._add(lanes, entries)
            if start == "0-0":
                await self.waits.prune()
                return

    async def _handover(self, start: str) -> Handover:
        """What this takeover knows before it claims (see :mod:`.handover`): on taking the
        partition, the entries a stop holds for the group (their key waits behind them
        here, as it did with the previous owner)."""
        handover = Handover(lost_read=start != "0-0")
        if handover.lost_read:
            return handover
        await self.waits.load()
        await self.halted.take_over()
        handover.set_held((await self.fenced("held"))[1])
        self.waits.met(handover.held)
        self.holds.flagged.update(entry.id for entry in handover.held)
        self.taken.update(entry.id for entry in handover.held)
        return handover

    async def _read_loop(self, lanes: KeyedLanes) -> None:
        config, room = self.shared.config, self.shared.room
        lost_read = False
        while not self.draining:
            try:
                if lost_read:  # a read whose reply was lost may have delivered entries to us:
                    # they are past every entry the lanes were given, so taking them over
                    # (as a new owner would) keeps each key's order; nothing is skipped
                    await self._takeover(lanes, after(self._last_added))
                    lost_read = False
                await room.wait_for_room()
                # the room a read asks for is held while it is on the wire: the partitions
                # read at once, and together they fetch no more than max_in_flight
                count = min(config.read_count, max(room.room(), 1))
                room.reserve(count)
                try:
                    reply = await self._read(count)
                finally:
                    room.release(count)  # the lanes take what came, with no await in between
                if reply[0] == 1:
                    if reply[2]:
                        self.holds.flagged.update(text(i) for i in reply[2])
                    self._add(lanes, replies.entries(reply[1]))
                    continue
                await self._wait_for_new(text(reply[1]), xread_block(config.block))
            except ServerUnavailableError as e:
                log.warning("partition %s: read failed, retrying: %s", self.stream, e)
                lost_read = True
                await anyio.sleep(READ_ERROR_BACKOFF)
            except (GroupNotFoundError, StreamNotFoundError) as e:
                self.shared.on_gone(e)
                await anyio.sleep_forever()  # the consumer drains this partition

    async def _wait_for_new(self, last_id: str, block: float) -> None:
        """Wait up to ``block`` seconds for an entry past ``last_id`` (``XREAD BLOCK``: it
        reads nothing for the group); the server holds this reply ``block`` seconds by
        design, so the wait may outlast the socket timeout."""
        command = resp.pack("XREAD", "COUNT", "1", "BLOCK", str(int(block * 1000)),
                            "STREAMS", self.stream, last_id)  # fmt: skip
        await self._connection.execute(command, 1, held=block)

    def _add(self, lanes: KeyedLanes, entries: list[RawEntry]) -> None:
        self.dispatcher.stats.received += len(entries)
        if entries:  # read and claimed in ID order: the last is the highest given so far
            self._last_added = max(self._last_added, StreamId.parse(entries[-1].id))
        lanes.add(entries)

    async def _read(self, count: int) -> list[Any]:
        """A fenced read of up to ``count`` new entries that carries the queued acks (one
        script call, one round trip, one fencing check for both)."""
        acker = self.acker
        ids = acker.take()
        try:
            reply = await self.fenced("read", count, *ids)
        except BaseException:
            acker.give_back(ids)  # their XACK may not have run: sent again (idempotent)
            raise
        acker.acked += len(ids)
        return reply

    async def fenced(self, op: str, *args: str | int | bytes, pooled: bool = False) -> list[Any]:
        """A fenced op on the read loop's connection (``pooled``: on one of the pool's, for
        the lanes' refills, which run beside the read loop)."""
        if not self.may_act():
            self.abandon()
            await anyio.sleep_forever()  # cancelled by abandon()
        connection = None if pooled else self._connection
        reply = await wire.fenced(self._client, self.stream, self.group, self.me, self.token,
                                  op, *args, connection=connection)  # fmt: skip
        if reply is None:
            self.abandon()
            await anyio.sleep_forever()
        assert reply is not None
        return reply

    # -- handling -------------------------------------------------------------------
    def cancel_running(self, entry_id: str) -> None:
        """A stop notice: cancel the handler running ``entry_id``, if one is."""
        if self.lanes is not None and self.lanes.cancel(entry_id):
            log.info("cancelled the running handler of stopped entry %s", entry_id)
