"""Coalesced, pipelined acknowledgements.

Handlers finish one by one; their IDs are collected and sent as one XACK per flush. While
a flush is on the wire more IDs accumulate, so under load one XACK covers a whole batch.
Under load the read loop also carries them: it takes the queued IDs and sends their XACK in
the same write as its next XREADGROUP (:meth:`Acker.send_along`), which saves
a round trip per batch; the acker lingers ``ACK_LINGER`` before flushing on its own so the
reader has the chance. A failed flush keeps its IDs and is retried (XACK is idempotent), so
no ack is lost to a dropped connection.

An entry whose handler staged outputs (``msg.publish``) is queued apart with them
(:meth:`Acker.ack_with`): its flush writes the outputs and the ack in one script
(:class:`~streamq.consume.outputs.OutputWriter`), which adds outputs only for an entry its
ack takes out of the pending list, so a flush sent again writes nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import redis.asyncio as aioredis

from ..errors import GroupNotFoundError, RedisFailure, StreamNotFoundError
from ..wire import resp
from ..wire.translate import translate

if TYPE_CHECKING:
    from .outputs import Command, Output, OutputWriter, Staged
    from .staging import WriterOnUse

log = logging.getLogger(__name__)

ACK_RETRY_BACKOFF = 0.2
MAX_IDS_PER_XACK = 1000
MAX_ENTRIES_PER_WRITE = 200  # entries with outputs per script call: an XACK, a few XADDs
# How long queued acks wait for the read loop to carry them before the acker sends them.
ACK_LINGER = 0.005


class Acker:
    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        writer: OutputWriter | WriterOnUse | None = None,
    ) -> None:
        self._client = client
        self._stream = stream
        self._group = group
        self._pending: list[str] = []
        self._staged: list[Staged] = []  # entries with outputs, acked by the writer
        self._writer = writer
        self._wakeup = anyio.Event()
        self._closing = False
        self._writing = False  # a write of staged entries is under way
        self._on_the_wire: list[str] = []  # IDs of the XACK a flush is sending
        self._written: list[Staged] = []  # the staged entries a write is sending
        self.acked = 0

    def ack(self, entry_id: str) -> None:
        """Queue ``entry_id`` for acknowledgement (no I/O here)."""
        pending = self._pending
        pending.append(entry_id)
        # The first since the queue was last emptied wakes run(), which only waits with an
        # empty queue; the others find it awake (cheaper than asking the event, per entry).
        if len(pending) == 1:
            self._wakeup.set()

    def ack_many(self, entry_ids: list[str]) -> None:
        """Queue several IDs at once."""
        self._pending.extend(entry_ids)
        if not self._wakeup.is_set():
            self._wakeup.set()

    def ack_with(self, entry_id: str, outputs: Sequence[Output | Command]) -> None:
        """Queue ``entry_id`` for acknowledgement with the outputs its handler staged."""
        staged = self._staged
        staged.append((entry_id, outputs))
        if len(staged) == 1:  # as ack(): the first since the queue was emptied wakes run()
            self._wakeup.set()

    async def ack_with_now(self, entry_id: str, outputs: Sequence[Output | Command]) -> None:
        """:meth:`ack_with`, written by the caller at once (with whatever else is staged)
        when no write is under way, so that a request's reply waits for no hop to the
        acker's task; else left for the write under way to be followed by the acker's.
        A failed write leaves them staged for the acker to send again."""
        self.ack_with(entry_id, outputs)
        if self._writing or self._closing:
            return
        staged = self._staged[:MAX_ENTRIES_PER_WRITE]
        del self._staged[: len(staged)]
        self._writing = True
        try:
            done = await self._write(staged)
        except BaseException as e:
            self._staged[:0] = staged
            self._wakeup.set()
            if isinstance(e, RedisFailure):  # the acker sends them again after its backoff
                log.warning("write of %d acks with outputs failed, left to the acker: %s",
                            len(staged), e)  # fmt: skip
                return
            raise
        finally:
            self._writing = False
            if self._staged:  # staged while this write was under way: the acker's now
                self._wakeup.set()
        if done:
            self.acked += len(staged)

    def count_acked(self, count: int) -> None:
        """``count`` entries were acked by another script (a request's, with its reply)."""
        self.acked += count

    def held(self) -> set[str]:
        """IDs handled and not known to be acknowledged yet: queued, or on the wire."""
        staged = (entry_id for entry_id, _ in (*self._staged, *self._written))
        return {*self._pending, *self._on_the_wire, *staged}

    @property
    def backlog(self) -> int:
        return len(self._pending) + len(self._staged)

    def take(self) -> list[str]:
        """Hand queued IDs to a caller that will send their XACK itself (the read loop)."""
        ids = self._pending[:MAX_IDS_PER_XACK]
        del self._pending[: len(ids)]
        return ids

    async def send_along(self, connection: resp.OwnConnection, command: bytes) -> Any:
        """Send ``command`` on ``connection`` with the XACK of the queued IDs ahead of it in
        the same write (one round trip for both); return the command's reply."""
        ids = self.take()
        if not ids:
            (reply,) = await connection.execute(command, 1)
            return reply
        packed = resp.pack_xack(self._stream, self._group, ids) + command
        try:
            acked, reply = await connection.execute(packed, 2, raise_errors=False)
        except BaseException:
            self.give_back(ids)
            raise
        if isinstance(acked, Exception):  # an error reply, read in place of XACK's count
            self.give_back(ids)  # run() retries them, or drops them if the group is gone
        else:
            self.acked += len(ids)
        if isinstance(reply, Exception):
            raise translate(reply, self._stream, self._group) from reply
        return reply

    def give_back(self, ids: list[str]) -> None:
        """IDs from :meth:`take` whose XACK may not have been applied: send them again."""
        self._pending[:0] = ids
        self._wakeup.set()

    async def run(self) -> None:
        """Flush until :meth:`close` is called and the backlog is empty."""
        while True:
            # closed while a flush was under way: its wake-up was spent before the flush
            # (the queues looked at directly: a property call per flush shows per entry)
            if self._closing and not self._pending and not self._staged:
                return
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
            if self._closing and not self._pending and not self._staged:
                return
            # plain acks linger: the read loop may carry them; entries with outputs (a
            # request's reply among them) go at once: their writer is waited for
            if not self._closing and not self._staged and len(self._pending) < MAX_IDS_PER_XACK:
                await anyio.sleep(ACK_LINGER)
                if not self._pending and not self._staged:
                    continue
            try:
                await self.flush()
            except (GroupNotFoundError, StreamNotFoundError) as e:
                log.warning("ack dropped: group %r is gone (%s)", self._group, e)
                self._pending.clear()
                self._staged.clear()
                self._wakeup.set()  # closing: run() returns now that the backlog is empty
            except RedisFailure as e:
                log.warning("ack flush failed, retrying in %.1fs: %s", ACK_RETRY_BACKOFF, e)
                await anyio.sleep(ACK_RETRY_BACKOFF)
                self._wakeup.set()

    async def flush(self) -> None:
        """Send every queued ack; on failure the IDs are put back for the next try."""
        while self._pending:
            ids = self._pending[:MAX_IDS_PER_XACK]
            del self._pending[: len(ids)]
            self._on_the_wire = ids
            try:
                await self._xack(ids)
            except BaseException:
                self._pending[:0] = ids
                raise
            finally:
                self._on_the_wire = []
            self.acked += len(ids)
        while self._staged and not self._writing:  # else the caller writing follows on
            staged = self._staged[:MAX_ENTRIES_PER_WRITE]
            del self._staged[: len(staged)]
            self._writing = True
            try:
                done = await self._write(staged)
            except BaseException:
                self._staged[:0] = staged
                raise
            finally:
                self._writing = False
            if done:
                self.acked += len(staged)

    async def _write(self, staged: list[Staged]) -> bool:
        """Write ``staged`` entries' outputs with their acks (one script)."""
        assert self._writer is not None  # only a consumer with a writer stages outputs
        self._written = staged
        try:
            return await self._writer.write(staged, None)
        finally:
            self._written = []

    async def _xack(self, ids: list[str]) -> None:
        """XACK with the command packed here: redis-py's generic packing of ~100 IDs per
        command cost a fifth of the consumer's CPU; this is one join."""
        await resp.execute(self._client, resp.pack_xack(self._stream, self._group, ids), 1)

    def close(self) -> None:
        """Ask :meth:`run` to return once the backlog is flushed."""
        self._closing = True
        self._wakeup.set()
