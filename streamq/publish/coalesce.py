"""Coalesced publishing: concurrent XADDs to one destination share one pipelined write.

A web service publishes from every request at once. Sent one command per round trip (what
redis-py does with a pool of connections), each publish pays a full round trip and a pool
check-out; 200 concurrent tasks managed ~9k/s. Here the publishes waiting for one
destination (one stream's slot on one node) are written together: *the first caller
flushes*. A caller that finds nobody writing sends at once, alone (a publisher awaiting one
message at a time never waits for anyone); callers arriving while a write is in flight queue
up, and when it completes the first of them takes the whole queue (up to ``MAX_BATCH``) into
the next write. No background task is needed, so it works wherever ``publish()`` is called.

Each caller gets its own entry ID, or its own error: an error reply (a wrong key type, a
``MOVED`` slot) belongs to its entry alone; a lost connection fails the entries of that
write. Queued callers past ``MAX_QUEUED`` wait for room (backpressure). The lane keeps one
connection checked out of the pool (the read loop does the same): a pool check-out costs a
lock, a timeout scope and a readiness probe per command, more than packing the XADD.

Cancellation: a caller cancelled while queued leaves the queue (its entry is not sent); a
caller whose entry is in flight is cancelled but the write goes on for the others (shielded,
at most ``FLUSH_PATIENCE``), so one cancelled request never fails its neighbours.
"""

from __future__ import annotations

from typing import Any

import anyio
import redis
import redis.asyncio as aioredis

from ..wire import resp
from ..wire.translate import RECONFIGURING, translate
from .turns import (
    LEADING,
    MAX_QUEUED,
    Shape,
    Turns,
    Waiter,
    destination,
    joined,
    new_head,
    outcome,
    pack_fields,
)

SMALL_WRITE = 16 * 1024  # bytes a write may be without a timeout (see KeptConnection)
FLUSH_PATIENCE = 30.0  # seconds a write's replies may take before its entries fail


class KeptConnection(resp.HeldConnection):
    """One connection kept checked out by a lane (as the read loop keeps its own), given
    back after a failure or a reply saying the cluster moved the slot; the next write takes
    one from the pool again, which finds the slot's master. Entries answered ASK (their slot
    is being migrated) are sent to the node named at once (:func:`resp.follow_asks`).

    Its writes skip redis-py's per-write timeout: redis-py 8 gives every connection a 5 s
    ``socket_timeout``, and a write under a timeout runs in a task of its own
    (``asyncio.wait_for``), a fifth of a lone publish's CPU. A write of a few kilobytes
    lands in the socket buffer at once; the read of its replies keeps the timeout, so a
    server that stopped answering is still noticed. Larger writes keep the timeout.
    """

    async def execute(self, packed: bytes, replies: int, *, bounded: bool = False) -> list[Any]:
        """Send ``packed``, read ``replies`` replies (error replies as exception objects).

        ``bounded``: the caller bounds the whole exchange with its own deadline, so the
        replies are read without redis-py's per-read timeout (one timer per reply).
        """
        if self._connection is None:
            self._connection = await self._pool.get_connection()
        elif _closed_by_server(self._connection):
            await self._connection.disconnect()  # the write below connects it again
        connection = self._connection
        timeout = connection.socket_timeout
        try:
            if connection.is_connected and (bounded or len(packed) <= SMALL_WRITE):
                connection.socket_timeout = None  # for the write
            await connection.send_packed_command([packed], check_health=False)
            connection.socket_timeout = None if bounded else timeout
            results = await resp.read_replies(connection, replies)
        except BaseException:
            connection.socket_timeout = timeout
            await self._discard()
            raise
        connection.socket_timeout = timeout
        if any(isinstance(result, RECONFIGURING) for result in results):
            results = await self._redirected(packed, results)
        return results


def _closed_by_server(connection: Any) -> bool:
    """Whether the server closed this idle connection (its idle ``timeout``, ``CLIENT
    KILL``, a restart): the pool would have noticed on check-out (redis-py probes every
    connection it hands out); a kept connection looks at its stream reader, for free."""
    reader = getattr(connection, "_reader", None)
    return reader is not None and reader.at_eof()


class Lane(Turns[anyio.Event]):
    """The publishes to one destination, written by whoever's turn it is."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__()
        self._connection = KeptConnection(client)
        self._room: anyio.Event | None = None

    async def send(self, packed: bytes) -> Any:
        """Send one packed XADD; return its reply (an exception object for an error reply)."""
        if not self._busy and not self._queue:
            return await self._send_alone(packed)
        while len(self._queue) >= MAX_QUEUED:
            await self._wait_for_room()
        waiter = Waiter(packed, anyio.Event())
        self._queue.append(waiter)
        try:
            await waiter.event.wait()
            if waiter.state == LEADING:
                await self._flush()
        except BaseException:
            self._abandon(waiter)
            raise
        return waiter.reply

    async def _send_alone(self, packed: bytes) -> Any:
        """Nobody is writing: send at once. Only this caller's entry is at stake, so a
        cancellation may cut the connection as usual."""
        self._busy = True
        try:
            (reply,) = await self._connection.execute(packed, 1)
        finally:
            self._hand_over()
        return reply

    async def _flush(self) -> None:
        """Write the head of the queue (this leader's entry first) and share the replies."""
        batch = self._take_batch()
        replies: list[Any] | None = None
        try:
            with anyio.move_on_after(FLUSH_PATIENCE, shield=True):
                replies = await self._connection.execute(joined(batch), len(batch), bounded=True)
            if replies is None:
                replies = [redis.TimeoutError(f"no reply within {FLUSH_PATIENCE:g}s")] * len(batch)
        except Exception as e:  # a lost connection: every entry of the write shares it
            replies = [e] * len(batch)
        finally:
            self._deliver(batch, replies)
            self._hand_over()

    async def _wait_for_room(self) -> None:
        if self._room is None:
            self._room = anyio.Event()
        await self._room.wait()

    def _make_room(self) -> None:
        if self._room is not None and len(self._queue) < MAX_QUEUED:
            self._room.set()
            self._room = None

    async def aclose(self) -> None:
        await self._connection.release()


class Coalescer:
    """Coalesced XADDs for one deployment: one :class:`Lane` per destination."""

    def __init__(self) -> None:
        self._lanes: dict[Any, Lane] = {}
        self._heads: dict[Shape, bytes] = {}  # packed once

    async def xadd(
        self,
        client: aioredis.Redis,
        stream: str,
        fields: dict[bytes | str, bytes | str],
        options: tuple[str, ...] = (),
    ) -> str:
        """Add one entry to ``stream`` through ``client``; return its ID.

        Raises what the server or the connection raised for this entry, as streamq's
        error (callers retry ServerUnavailableError as before).
        """
        key = destination(client)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(client)
        shape = (stream, options, len(fields))
        head = self._heads.get(shape)
        if head is None:
            head = new_head(self._heads, shape)
        try:
            reply = await lane.send(pack_fields(head, fields))
        except (redis.RedisError, OSError) as e:
            raise translate(e, stream) from e
        return outcome(reply, stream)

    async def aclose(self) -> None:
        """Give the lanes' connections back to their pools."""
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            await lane.aclose()
