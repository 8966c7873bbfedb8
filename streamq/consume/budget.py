"""The two limits of a consumer process, with one meaning in every mode.

* ``max_in_flight`` (:class:`Budget`): the most entries this process holds, from the moment
  they are fetched (read, claimed or taken over) until their handler has finished, over
  every partition of its topic: entries in the workers' queue, in a batch, in a key's lane
  and the room a fetch on the wire has asked for. An entry that waits (behind its key, in
  a backoff, a halted or stopped key) holds at most one unit of it, so a waiting key never
  starves the other keys of the consumer; fetching waits until a useful amount is free
  (``low_water``) rather than reading entry by entry.
* ``concurrency`` (:class:`Slots`): the most handlers (single or batch) running at once.
  Waiting entries hold no slot.

Reads hold their room while they are on the wire (:meth:`Budget.reserve`), so readers,
claimers and the partitions of a topic, which fetch concurrently, never overshoot the
budget together. Without claimers (fan-out) the readers share the whole budget; with them
(a group) at most half, so the claimers have room to take over idle entries. Entries that
waited for flow control and may go now come before new reads
(:meth:`Budget.hold_for_release`): a flow stage short of room holds the reads back and is
woken as room returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import TracebackType

import anyio


def _never() -> bool:
    return False


class Slots:
    """At most ``total`` holders at once (``async with slots:`` or :meth:`acquire` and
    :meth:`release`), first come first served.

    Unlike ``anyio.CapacityLimiter``, taking a free slot does not yield to the event loop:
    a checkpoint per entry (an anyio limiter makes two) halved the throughput of a fast
    handler. Waiting (all slots taken) is cancellable as usual; a released slot goes to
    the longest waiter.
    """

    def __init__(self, total: int) -> None:
        self.total = self.free = total
        self._waiters: deque[anyio.Event] = deque()

    async def acquire(self) -> None:
        if self.free and not self._waiters:
            self.free -= 1
            return
        handed = anyio.Event()
        self._waiters.append(handed)
        try:
            await handed.wait()  # a releasing holder hands its slot over and sets it
        except BaseException:
            if handed.is_set():  # handed a slot while being cancelled: pass it on
                self.release()
            else:
                self._waiters.remove(handed)
            raise

    def release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self.free += 1

    async def __aenter__(self) -> None:
        if self.free and not self._waiters:  # acquire(), inlined: once per entry
            self.free -= 1
            return
        await self.acquire()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Budget:
    """``max_in_flight`` for one process: entries held (``used``) plus room asked for by
    fetches on the wire (``reserved``), shared by every reader of the consumer."""

    def __init__(
        self,
        max_in_flight: int,
        read_count: int,
        readers: int = 1,
        *,
        claimers: bool = True,
        low_water: int | None = None,
    ) -> None:
        self.max = max_in_flight
        self.used = 0
        self.reserved = 0
        # A blocking read holds its room while it waits: each reader a fair share of the
        # readers' part (see Capacity.read_size for a busy partition's read).
        shares = 2 * readers if claimers else readers
        self.read_limit = max(1, max_in_flight // shares)
        # a reader waits until a quarter of a read fits, rather than reading one by one
        if low_water is None:
            low_water = min(read_count, self.read_limit * 2) // 4
        self.low_water = max(1, min(low_water, max_in_flight))
        self._room_event = anyio.Event()
        self.waiting = False  # a reader waits for room: giving some back wakes it
        # entries the flow stages would release now had they room: the reads wait for them
        self.due = 0
        self._stages: list[Callable[[], None]] = []  # what wakes each flow stage

    def room(self) -> int:
        """Entries that may still be fetched (the room released entries wait for is not)."""
        return self.max - self.used - self.reserved - self.due

    def free(self) -> int:
        """Units nothing holds or asked for: what a flow stage may release."""
        return self.max - self.used - self.reserved

    def join(self, wake_stage: Callable[[], None]) -> None:
        """A flow stage releases entries within this budget: ``wake_stage()`` once room
        returns while it holds the reads back (until :meth:`leave`)."""
        self._stages.append(wake_stage)

    def leave(self, wake_stage: Callable[[], None], due: int) -> None:
        """A flow stage stopped, ``due`` of its entries counted as ready."""
        self._stages.remove(wake_stage)
        self.hold_for_release(-due)

    def hold_for_release(self, change: int) -> None:
        """A flow stage has ``change`` more (or fewer) entries ready than room: the reads
        wait until the stages have released them."""
        self.due += change
        if change < 0:
            self.wake()

    def take(self, n: int) -> None:
        """``n`` fetched entries are held."""
        self.used += n

    def give(self, n: int) -> None:
        """``n`` held entries are finished (or no longer held)."""
        self.used -= n
        if (self.waiting or self.due) and self.max - self.used - self.reserved >= self.low_water:
            self.wake()

    def reserve(self, n: int) -> None:
        """Hold room for a fetch on the wire."""
        self.reserved += n

    def release(self, n: int) -> None:
        """The fetch is over (what it brought is taken separately)."""
        self.reserved -= n
        self.wake()  # room is back (a read that came back empty finishes nothing)

    async def wait_for_room(self, stopping: Callable[[], bool] = _never) -> None:
        """Until a worthwhile fetch fits (``low_water``), or ``stopping()``."""
        while self.room() < self.low_water and not stopping():
            if self._room_event.is_set():  # a new one only once the last was used: the
                self._room_event = anyio.Event()  # partitions' readers wait on the same one
            self.waiting = True
            await self._room_event.wait()

    async def next_wake(self) -> None:
        """Until room is next given back or released (a level over its share waits so)."""
        if self._room_event.is_set():
            self._room_event = anyio.Event()
        self.waiting = True
        await self._room_event.wait()

    def wake(self) -> None:
        """Let a waiting reader look again, and a flow stage short of room release more
        once a worthwhile amount is free (cheap when nobody waits)."""
        if self.due and self.max - self.used - self.reserved >= self.low_water:
            for wake_stage in self._stages:
                wake_stage()
        if self.waiting:
            self.waiting = False
            self._room_event.set()
