"""Taking turns to write: the queue of one coalesced publishing lane and the commands it
writes, without I/O.

Shared by the asyncio lane (:mod:`streamq.publish.coalesce`) and the threads' lane
(:mod:`streamq.publish.coalesce_blocking`), which add only the waiting and the writing:
where a publish writes (:func:`destination`), its XADD packed (:func:`new_head`,
:func:`pack_fields`), and what each reply means (:func:`outcome`). A caller
that finds nobody writing sends alone; callers arriving meanwhile queue (:class:`Waiter`);
when a write completes, the first of them is named to lead the next one, which carries the
head of the queue (up to ``MAX_BATCH`` entries, the leader's first); each caller of a write
gets its own reply. The threads' lane calls these methods under its lock.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Generic, Protocol, TypeVar

import redis

from ..wire import resp
from ..wire.replies import added_id
from ..wire.translate import translate

MAX_BATCH = 1000  # XADDs per write: beyond this a write stops growing cheaper per entry
MAX_QUEUED = 10_000  # publishes queued per destination before callers wait for room
MAX_HEADS = 1024  # packed command heads kept (one per stream and shape of entry)

QUEUED, LEADING, SENT = 0, 1, 2  # a waiter's state


class Event(Protocol):
    """What wakes a waiter: an ``anyio.Event`` or a ``threading.Event``."""

    def set(self) -> None: ...


E = TypeVar("E", bound=Event)


class Waiter(Generic[E]):
    """One queued publish: its packed command, and where its reply is left."""

    __slots__ = ("event", "packed", "reply", "state")

    def __init__(self, packed: bytes, event: E) -> None:
        self.packed = packed
        self.event = event
        self.state = QUEUED
        self.reply: Any = None


class Turns(Generic[E]):
    """The publishes queued for one destination, and whose turn it is to write."""

    interrupted = "the publishing task was interrupted"  # a write cut by KeyboardInterrupt...

    def __init__(self) -> None:
        self._queue: deque[Waiter[E]] = deque()
        self._busy = False  # a write is in flight, or a leader was named to start one

    @property
    def queued(self) -> int:
        """Publishes waiting for the write in flight to complete."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether a write is in flight (or about to be)."""
        return self._busy

    def _make_room(self) -> None:
        """The queue got shorter: wake callers waiting for room."""
        raise NotImplementedError

    def _take_batch(self) -> list[Waiter[E]]:
        """The leader's write: the head of the queue, this leader's entry first."""
        batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
        for waiter in batch:
            waiter.state = SENT
        self._make_room()
        return batch

    def _deliver(self, batch: list[Waiter[E]], replies: list[Any] | None) -> None:
        """Each caller of a write gets its reply (None: the write was interrupted)."""
        if replies is None:  # not an Exception (KeyboardInterrupt...): tell the others
            replies = [redis.ConnectionError(self.interrupted)] * len(batch)
        for waiter, reply in zip(batch, replies, strict=True):
            waiter.reply = reply
            waiter.event.set()

    def _hand_over(self) -> None:
        """The write is done: the first queued caller, if any, leads the next one."""
        if self._queue:
            head = self._queue[0]
            head.state = LEADING
            head.event.set()
        else:
            self._busy = False

    def _abandon(self, waiter: Waiter[E]) -> None:
        """A cancelled caller: out of the queue, and if it was to lead, the next one leads."""
        if waiter.state == SENT:
            return  # in a write already: the write goes on, its reply is dropped
        self._queue.remove(waiter)
        self._make_room()
        if waiter.state == LEADING:
            self._hand_over()


def joined(batch: list[Waiter[Any]]) -> bytes:
    """The packed commands of a write, as one."""
    return b"".join(waiter.packed for waiter in batch)


def xadd_head(stream: str, options: tuple[str, ...], field_count: int) -> bytes:
    """``XADD stream [options] *`` as RESP, for an entry of ``field_count`` fields."""
    count = 3 + len(options) + 2 * field_count
    words = b"".join(resp.bulk(word) for word in (stream, *options, "*"))
    return b"*%d\r\n$4\r\nXADD\r\n%s" % (count, words)


Shape = tuple[str, tuple[str, ...], int]  # stream, options, field count: one XADD head


def new_head(heads: dict[Shape, bytes], shape: Shape) -> bytes:
    """The XADD head of ``shape``, packed and kept in ``heads`` (emptied when full)."""
    if len(heads) >= MAX_HEADS:
        heads.clear()
    head = heads[shape] = xadd_head(*shape)
    return head


def pack_fields(head: bytes, fields: dict[bytes | str, bytes | str]) -> bytes:
    """``head`` followed by the field-value pairs (one format per pair: this runs per publish)."""
    parts = [head]
    for key, value in fields.items():
        k = key if type(key) is bytes else key.encode()  # type: ignore[union-attr]
        v = value if type(value) is bytes else value.encode()  # type: ignore[union-attr]
        parts.append(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
    return b"".join(parts)


def outcome(reply: Any, stream: str) -> str:
    """An XADD reply as the entry ID, or the error it carries raised (streamq's), or
    StreamMissing (``NOMKSTREAM`` and no stream)."""
    if isinstance(reply, BaseException):
        raise translate(reply, stream) from reply
    return added_id(reply)


def destination(client: Any) -> Any:
    """What makes two clients write to the same place: the pool they draw from, or for
    streamq's routed clients (:class:`~streamq.wire.routing.SlotPool`, made afresh per
    ``client_for``) their deployment and slot or node."""
    pool = client.connection_pool
    router = getattr(pool, "router", None)
    if router is None:
        return pool
    return (id(router), pool.slot, getattr(pool, "address", None))
