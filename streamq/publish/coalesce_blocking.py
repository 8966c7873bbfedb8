"""Coalesced publishing for threads: :mod:`streamq.publish.coalesce` for the blocking client.

A :class:`streamq.Publisher` shared by the threads of a web server: a thread that finds
nobody writing sends its XADD at once, alone; threads arriving meanwhile queue, and when the
write completes the first of them writes the whole queue (up to ``MAX_BATCH``) as one
pipeline and hands each thread its own reply. One connection per destination stays checked
out of the pool: with the pool's lock taken twice per command, 64 threads publishing one by
one mostly waited for each other there.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

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


class SyncKeptConnection:
    """One connection kept out of a blocking pool, given back after a failure or a reply
    saying the cluster moved the slot."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._connection: Any = None

    def execute(self, packed: bytes, replies: int) -> list[Any]:
        """Send ``packed``, read ``replies`` replies (error replies as exception objects)."""
        if self._connection is None:
            self._connection = self._pool.get_connection()
        else:
            _reconnect_if_closed(self._connection)
        connection = self._connection
        try:
            connection.send_packed_command([packed], check_health=False)
            results = resp.read_replies_sync(connection, replies)
        except BaseException:
            connection.disconnect()  # its replies may be out of step
            self.release()
            raise
        if any(isinstance(result, RECONFIGURING) for result in results):
            results = resp.follow_asks_sync(self._pool, packed, results)  # ASK: at once
            if any(isinstance(result, RECONFIGURING) for result in results):
                self.release()  # MOVED...: the next write finds the new master
        return results

    def release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(connection)


def _reconnect_if_closed(connection: Any) -> None:
    """A kept connection the server closed while it was idle (its idle ``timeout``,
    ``CLIENT KILL``, a restart) is reconnected before use, as the pool's check-out would
    (one poll of the socket)."""
    try:
        stale = connection.can_read(0)  # idle: nothing should be there to read
    except (redis.ConnectionError, OSError):
        stale = True
    if stale:
        connection.disconnect()  # the next write connects again


class SyncLane(Turns[threading.Event]):
    """The publishes of all threads to one destination (its turns taken under a lock)."""

    interrupted = "the publishing thread was interrupted"

    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        self._connection = SyncKeptConnection(client)
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)

    def send(self, packed: bytes) -> Any:
        """Send one packed XADD; return its reply (an exception object for an error reply)."""
        with self._lock:
            alone = not self._busy and not self._queue
            if alone:
                self._busy = True
            else:
                while len(self._queue) >= MAX_QUEUED:
                    self._room.wait()
                waiter = Waiter(packed, threading.Event())
                self._queue.append(waiter)
        if alone:
            try:
                (reply,) = self._connection.execute(packed, 1)
            finally:
                with self._lock:
                    self._hand_over()
            return reply
        try:
            waiter.event.wait()
            if waiter.state == LEADING:
                self._flush()
        except BaseException:  # KeyboardInterrupt in the main thread
            with self._lock:
                self._abandon(waiter)
            raise
        return waiter.reply

    def _flush(self) -> None:
        with self._lock:
            batch = self._take_batch()
        replies: list[Any] | None = None
        try:
            replies = self._connection.execute(joined(batch), len(batch))
        except Exception as e:  # a lost connection: every entry of the write shares it
            replies = [e] * len(batch)
        finally:
            self._deliver(batch, replies)
            with self._lock:
                self._hand_over()

    def _make_room(self) -> None:  # called under the lock
        self._room.notify_all()

    def close(self) -> None:
        self._connection.release()


class SyncCoalescer:
    """Coalesced XADDs from many threads: one :class:`SyncLane` per destination."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lanes: dict[Any, SyncLane] = {}
        self._heads: dict[Shape, bytes] = {}

    def xadd(
        self,
        client: redis.Redis,
        stream: str,
        fields: dict[bytes | str, bytes | str],
        options: tuple[str, ...] = (),
    ) -> str:
        """Add one entry to ``stream`` through ``client``; return its ID (thread-safe)."""
        key = destination(client)
        shape = (stream, options, len(fields))
        lane, head = self._lanes.get(key), self._heads.get(shape)
        if lane is None or head is None:
            lane, head = self._prepare(client, key, shape)
        try:
            reply = lane.send(pack_fields(head, fields))
        except (redis.RedisError, OSError) as e:
            raise translate(e, stream) from e
        return outcome(reply, stream)

    def _prepare(self, client: redis.Redis, key: Any, shape: Shape) -> tuple[SyncLane, bytes]:
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = SyncLane(client)
            head = new_head(self._heads, shape)
        return lane, head

    def close(self) -> None:
        """Give the lanes' connections back to their pools."""
        with self._lock:
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.close()
