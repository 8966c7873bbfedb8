"""Fan-out mode's source: a queue with ``group=None`` reads its topic with ``XREAD``.

Every subscriber receives every entry from its start position (``$`` resolved when the
queue opens, ``0``, or an ID) and keeps its own cursor per stream, in memory: nothing is
recorded in Redis, nothing is pending, acked, claimed or dead-lettered (its outcome policy
is :class:`~streamq.consume.outcomes.FanoutOutcomes`). The rest is the one consumer engine
(:class:`~streamq.consume.consumer.Consumer`): the in-flight budget, the hand-off to the
workers, batching, the stop contract.

One blocking XREAD loop per stream (a partition's), on its own connection: never one read
across streams, which a cluster may hold on different slots. An empty read (``BLOCK`` over,
at most :data:`~streamq.consume.gone.XREAD_BLOCK_MAX` seconds: a deletion does not end an
XREAD), and under a steady flow one read every ``block``, checks that the stream still
exists: a stream that existed and is gone (deleted, or the topic terminated) stops the
subscriber on its own. A terminate notice on the control channel makes the same check at
once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import redis.asyncio as aioredis

from .._backoff import Backoff
from ..config import ConsumerConfig
from ..errors import RedisFailure, ServerUnavailableError
from ..message import RawEntry
from ..topic.control import was_terminated
from ..wire import replies, resp
from .capacity import Capacity
from .gone import xread_block
from .positions import Cursors
from .reader import Enqueue
from .timing import MAX_READ_ERROR_BACKOFF, READ_ERROR_BACKOFF

log = logging.getLogger(__name__)

StopAsked = Callable[[str], None]  # request_stop(reason), auto


class StreamReader:
    """The XREAD loop of one stream, from its cursor in ``positions``."""

    claimed_total = 0  # a fan-out read claims nothing (mq.stats()["claimed"])

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        *,
        config: ConsumerConfig,
        capacity: Capacity,
        positions: Cursors,
        enqueue: Enqueue,
        stopping: Callable[[], bool],
        gone: StopAsked,
        fail: Callable[[RedisFailure], None],
    ) -> None:
        self._client, self.stream, self._capacity = client, stream, capacity
        self._positions, self._enqueue, self._stopping = positions, enqueue, stopping
        self._gone, self._fail = gone, fail
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
        capacity, stopping = self._capacity, self._stopping
        backoff = Backoff(READ_ERROR_BACKOFF, MAX_READ_ERROR_BACKOFF)
        while not stopping():
            await capacity.wait_for_room(stopping)
            if stopping():
                return
            try:
                entries = await self._read()
                if entries:
                    self._existed = True
                    self._positions[self.stream] = entries[-1].id
                    await self._enqueue(entries)
                if not stopping() and (not entries or self._check_due()):
                    await self.check_gone()
                backoff.reset()
            except ServerUnavailableError as e:  # the cursor is kept: nothing is missed
                delay = backoff.next()
                log.warning("read of %s failed, retrying in %.1fs: %s", self.stream, delay, e)
                await anyio.sleep(delay)
            except RedisFailure as e:
                log.error("read of %s failed with an error that will not go away: %s",
                          self.stream, e)  # fmt: skip
                self._fail(e)

    async def _read(self) -> list[RawEntry]:
        capacity = self._capacity
        count = max(1, min(self._read_count, capacity.room(), capacity.read_size()))
        capacity.reserve(count)  # while the read is out: other partitions' reads share it
        reply, rows = None, []
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                command = resp.pack(
                    "XREAD", "COUNT", str(count), "BLOCK", str(self._block_ms),
                    "STREAMS", self.stream, self._positions[self.stream],
                )  # fmt: skip
                if not self._stopping():
                    reply = (await self._connection.execute(command, 1))[0]
            rows = replies.read_rows(reply)
        finally:
            self._scope = None
            capacity.release_read(count, len(rows))
        return replies.entries(rows) if rows else []

    def _check_due(self) -> bool:
        """Under a steady flow reads are never empty: look every ``block`` all the same
        (a terminated topic that a producer made again at once still stops us)."""
        return anyio.current_time() >= self._checked_at + self._block_ms / 1000

    async def check_gone(self) -> None:
        """Stop the subscriber if the stream is gone (also on a terminate notice)."""
        self._checked_at = anyio.current_time()
        exists = await self._client.exists(self.stream)  # before the mark: see gone.why_gone
        if await was_terminated(self._client, self.stream, self._positions.opened_ms):
            reason = "topic_terminated"
        elif exists:
            self._existed = True
            return
        elif self._existed:
            reason = "stream_deleted"
        else:
            return  # not created yet: the first publish creates it
        log.warning("auto-stop (%s): stream %s is gone", reason, self.stream)
        self._gone(reason)
