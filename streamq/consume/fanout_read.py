"""The reading side of a fan-out subscriber (:mod:`streamq.consume.fanout`): the room its
reads share, and the XREAD loop of each stream.

In-flight work is bounded for the topic as a whole: a reader asks for no more entries
than ``max_in_flight`` leaves room for, so entries are read only as fast as the handlers
take them. An empty read (``BLOCK`` over, at most :data:`~streamq.consume.gone.XREAD_BLOCK_MAX`
seconds: a deletion does not end an XREAD), and under a steady flow one read every
``block``, checks that the stream still exists: a stream that existed and is gone
(deleted, or the topic terminated) stops the subscriber on its own. A terminate notice on
the control channel makes the same check at once (:mod:`streamq.consume.fanout`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Protocol

import anyio
import redis.asyncio as aioredis

from .._backoff import Backoff
from ..config import ConsumerConfig
from ..errors import RedisFailure, ServerUnavailableError
from ..message import RawEntry
from ..topic.control import was_terminated
from ..wire import replies, resp
from .gone import xread_block

# the records keep the subscriber's logger name: filters set on it go on working
log = logging.getLogger("streamq.consume.fanout")

READ_ERROR_BACKOFF = 0.5
MAX_READ_ERROR_BACKOFF = 5.0


class Room:
    """Entries read and not yet finished (``used``), plus the room held by reads under
    way (``held``), for the whole topic, up to ``limit``. A read holds at most a fair
    share (``limit / readers``), so a partition whose read blocks on an empty stream does
    not keep the room from a busy one."""

    def __init__(self, limit: int, readers: int) -> None:
        self.limit, self.used, self.held = limit, 0, 0
        self.share = max(1, limit // readers)
        self._freed = anyio.Event()
        self._waiting = 0

    def free(self) -> int:
        return self.limit - self.used - self.held

    def hold(self, n: int) -> None:
        self.held += n

    def unhold(self, n: int) -> None:
        self.held -= n
        if n and self._waiting:
            self.wake()

    def take(self, n: int) -> None:
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        if n and self._waiting:
            self.wake()

    def wake(self) -> None:
        """Wake every waiting reader (each looks again)."""
        self._freed.set()
        self._freed = anyio.Event()

    async def wait(self, stopping: Callable[[], bool]) -> None:
        while self.free() <= 0 and not stopping():
            self._waiting += 1
            try:
                await self._freed.wait()
            finally:
                self._waiting -= 1


class ReadOwner(Protocol):
    """What a :class:`StreamReader` needs of the subscriber it reads for
    (:class:`~streamq.consume.fanout.FanoutConsumer`)."""

    config: ConsumerConfig
    room: Room

    def stopping(self) -> bool: ...

    def deliver(self, index: int, entries: list[RawEntry]) -> None: ...

    def fail(self, error: BaseException) -> None: ...

    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None: ...


class StreamReader:
    """The XREAD loop of one stream, from its cursor in ``positions``."""

    def __init__(
        self,
        owner: ReadOwner,
        client: aioredis.Redis,
        stream: str,
        index: int,
        positions: MutableMapping[str, str],
    ) -> None:
        self._owner, self._client, self.stream, self.index = owner, client, stream, index
        self._positions = positions
        config = owner.config
        self._block_ms, self._read_count = int(xread_block(config.block) * 1000), config.read_count
        self._connection = resp.OwnConnection(client, held=config.block)
        self._scope: anyio.CancelScope | None = None
        self._existed = False  # the stream was seen: its absence then means it was deleted
        self._checked_at = 0.0

    def cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self._connection.release()

    async def _loop(self) -> None:
        owner, room = self._owner, self._owner.room
        backoff = Backoff(READ_ERROR_BACKOFF, MAX_READ_ERROR_BACKOFF)
        while not owner.stopping():
            await room.wait(owner.stopping)
            if owner.stopping():
                return
            try:
                entries = await self._read(min(self._read_count, room.free(), room.share))
                if entries:
                    self._existed = True
                    self._positions[self.stream] = entries[-1].id
                    owner.deliver(self.index, entries)
                if not owner.stopping() and (not entries or self._check_due()):
                    await self.check_gone()
                backoff.reset()
            except ServerUnavailableError as e:  # the cursor is kept: nothing is missed
                delay = backoff.next()
                log.warning("read of %s failed, retrying in %.1fs: %s", self.stream, delay, e)
                await anyio.sleep(delay)
            except RedisFailure as e:
                log.error("read of %s failed with an error that will not go away: %s",
                          self.stream, e)  # fmt: skip
                owner.fail(e)

    async def _read(self, count: int) -> list[RawEntry]:
        room = self._owner.room
        room.hold(count)  # while the read is out: readers of other partitions share the room
        reply = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                command = resp.pack(
                    "XREAD", "COUNT", str(count), "BLOCK", str(self._block_ms),
                    "STREAMS", self.stream, self._positions[self.stream],
                )  # fmt: skip
                if not self._owner.stopping():
                    reply = (await self._connection.execute(command, 1))[0]
        finally:
            self._scope = None
            room.unhold(count)
        rows = replies.read_rows(reply)
        return replies.entries(rows) if rows else []

    def _check_due(self) -> bool:
        """Under a steady flow reads are never empty: look every ``block`` all the same
        (a terminated topic that a producer made again at once still stops us)."""
        return anyio.current_time() >= self._checked_at + self._block_ms / 1000

    async def check_gone(self) -> None:
        """Stop the subscriber if the stream is gone (also on a terminate notice)."""
        self._checked_at = anyio.current_time()
        if await was_terminated(self._client, self.stream):
            reason = "topic_terminated"
        elif await self._client.exists(self.stream):
            self._existed = True
            return
        elif self._existed:
            reason = "stream_deleted"
        else:
            return  # not created yet: the first publish creates it
        log.warning("auto-stop (%s): stream %s is gone", reason, self.stream)
        self._owner.request_stop(reason, auto=True)
