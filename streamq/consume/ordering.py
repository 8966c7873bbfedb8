"""Keyed lanes: the entries of one key run one at a time, in the order they were added;
lanes of different keys run concurrently within a shared limit (``concurrency``).

One lane per key with work, as one task that lives while its queue is not empty: an idle
key costs nothing. Entries without a key share the lane of the key ``None`` (the keyless
entries of a partition are ordered among themselves). The consumer's
:class:`~.budget.Budget` bounds the entries its lanes hold (``max_in_flight``): a partition
reads only what the lanes can take.

A key holds at most ``per_key`` of it, a waiting key (halted, held, in a backoff) none:
its entries past that stay in the pending list, where the read put them, and come back in
ID order through ``refill``. So reading goes on past a waiting or slow key.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup

from ..config import ConsumerConfig
from ..message import RawEntry
from .budget import Budget, Slots

LaneKey = bytes | None


@dataclass(frozen=True, slots=True)
class Later:
    """``run_entry``'s answer for an entry to run again after ``delay`` seconds: its key
    waits, holding no handler slot and no room. ``waits_for``: the flow-control reason it
    waits for (``"pause"``, ``"rate_limit"``, ``"throttle"``), counted by
    :meth:`KeyedLanes.waiting`; None for a retry's backoff. ``until``: what ends the wait
    sooner (the end of a pause), if anything."""

    delay: float
    waits_for: str | None = None
    until: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class _WakeUp:
    """A key's wake-up to come (compared by identity: a newer one replaces it)."""

    waits_for: str | None


RunEntry = Callable[[RawEntry], Awaitable[bool | Later]]
# an entry whose run a stop notice cancelled: set it aside (True) or run it again (False)
OnStopped = Callable[[RawEntry], Awaitable[bool]]
# a key's entries left in the pending list: refill(key, from ID, at most) -> (up to that
# many, in ID order, and the ID to go on from, or None when none is left of those given to
# the lanes before the call: the lanes spill the ones read meanwhile again)
Refill = Callable[[LaneKey, str, int], Awaitable[tuple[list[RawEntry], str | None]]]


class Runner:
    """One runner task: the cancel scope it runs lanes under, and the key and entry it
    runs (two attribute stores per entry; a stop notice, which is rare, looks through the
    few runners). One scope serves many entries: a scope per entry costs more than a
    no-op handler."""

    __slots__ = ("entry", "key", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.key: LaneKey = None
        self.entry: RawEntry | None = None


def per_key_share(config: ConsumerConfig) -> int:
    """How many entries one key's lane keeps in memory (a quarter of ``max_in_flight``, at
    most ``read_count``), and how much room a partition waits for before it reads again."""
    return max(1, min(config.read_count, config.max_in_flight // 4))


class KeyedLanes:
    """The lanes of one partition. ``run_entry(entry)`` handles one entry and returns
    whether its lane goes on (False: the lane stops, e.g. the lease was lost or the key
    halted; its remaining entries stay where they are, pending in Redis), or
    :class:`Later`: the lane stops and goes on from that entry after the delay.

    The lanes are run by a pool of runner tasks, at most ``concurrency``: a runner takes a
    key whose lane is ready, runs the lane (holding one of the consumer's handler slots)
    until it is empty or stops, then takes the next ready key, and waits when there is
    none. A key is run by one runner at a time, so its entries never run at once. A
    runner that takes a key while more are ready wakes one more (as
    :class:`~streamq.consume.workqueue.WorkQueue` does): if handlers never suspend, one
    runner runs a whole read and the others stay asleep; if they do, runners join in at
    once up to the limit. Runners live as long as the partition: a task per key with
    work, started and ended for each read, was a measurable cost per entry.

    :meth:`cancel` (a stop notice) cancels the run of an entry: its lane stops there and
    ``on_stopped(entry)`` sets the entry aside (or, resumed meanwhile, the lane goes on).

    With ``refill`` a lane keeps at most ``per_key`` entries, and a stopped lane only
    the entry it stopped at, which counts against the room only once the lane goes on again;
    the key's later entries are *spilled*: left in the pending list from the first of them
    on (every later entry of the key read meanwhile too, so the lane still holds a prefix of
    its key's entries) and refilled in ID order when the lane has run what it holds."""

    def __init__(
        self, tg: TaskGroup, run_entry: RunEntry, slots: Slots, room: Budget, per_key: int,
        on_stopped: OnStopped | None = None, refill: Refill | None = None,
    ) -> None:  # fmt: skip
        self._tg, self._run_entry, self._slots, self._room = tg, run_entry, slots, room
        self._on_stopped, self._refill = on_stopped, refill
        self.stopped_keys: set[LaneKey] = set()  # lanes that stopped with entries left
        # without refill every entry is kept: no share, and a stopped lane takes more too
        self._per_key = max(1, per_key) if refill is not None else sys.maxsize
        self._spill_stopped = self.stopped_keys if refill is not None else frozenset()
        self._spilled: dict[LaneKey, str] = {}  # key -> its first entry left pending
        # key -> how many of its entries were left pending: what a refill asks for, so that
        # it stops looking once it has them, and none is left at 0 (more, never fewer, than
        # are left: entries deleted meanwhile are not known)
        self._spill_count: dict[LaneKey, int] = {}
        self._later: dict[LaneKey, _WakeUp] = {}  # key -> its wake-up to come
        self._runners_at_work: list[Runner] = []
        self._lanes: dict[LaneKey, deque[RawEntry]] = {}
        self._ready: deque[LaneKey] = deque()  # lanes with entries that no runner holds
        self._sleeping: deque[anyio.Event] = deque()  # runners waiting for a ready lane
        self._waking = 0  # runners woken that have not looked for a lane yet
        self._runners = 0
        self._max_runners = max(1, slots.total)
        self._idle = anyio.Event()
        self._idle.set()

    @property
    def held(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    @property
    def spilled(self) -> int:
        """How many keys have entries left in the pending list (see the class)."""
        return len(self._spilled)

    def idle_heads(self) -> list[RawEntry]:
        """The first entry of each lane that no runner runs now (waiting, or not reached)."""
        running = {r.entry.id for r in self._runners_at_work if r.entry is not None}
        return [lane[0] for lane in self._lanes.values() if lane and lane[0].id not in running]

    def behind(self, key: LaneKey) -> int:
        """How many entries wait behind ``key``'s first (its lane's, 1 for spilled ones)."""
        lane = self._lanes.get(key)
        return len(lane) - 1 + (key in self._spilled) if lane else 0

    def add(self, entries: list[RawEntry]) -> None:
        """Queue ``entries`` (in ID order) behind the earlier entries of their keys (past a
        key's share, spilled: see the class)."""
        lanes, ready, spilled = self._lanes, self._ready, self._spilled
        per_key, spill_stopped = self._per_key, self._spill_stopped
        kept = 0
        for entry in entries:
            key = entry.fields.get(b"key")
            lane = lanes.get(key)
            if lane is None:
                lanes[key] = deque((entry,))
                kept += 1
                if key not in self.stopped_keys:  # a stopped lane takes no more work
                    ready.append(key)
            elif spilled and key in spilled:  # behind entries of its key not in memory
                if not spilled[key]:  # read while its lane is refilled: refilled after
                    spilled[key] = entry.id
                self._spill_count[key] += 1
            elif len(lane) < per_key and key not in spill_stopped:
                lane.append(entry)
                kept += 1
            else:
                spilled[key] = entry.id
                self._spill_count[key] = 1
        self._room.take(kept)
        if ready:
            self._busy()
            self._wake_one()

    def _busy(self) -> None:
        if self._idle.is_set():
            self._idle = anyio.Event()

    def _wake_one(self) -> None:
        """One more runner for the ready lanes: a sleeping one, else a new one (up to the
        limit), unless one was woken and has not looked yet."""
        if self._waking:
            return
        if self._sleeping:
            self._waking += 1
            self._sleeping.popleft().set()
        elif self._runners < self._max_runners:
            self._runners += 1
            self._waking += 1
            self._tg.start_soon(self._runner)

    async def _runner(self) -> None:
        runner = Runner()
        self._runners_at_work.append(runner)
        woken = True
        try:
            while True:  # a fresh scope after a run a stop notice cancelled
                with anyio.CancelScope() as runner.scope:
                    await self._serve(runner, woken)
                woken = False
                await self._stopped_while_running(runner)
        finally:
            self._runners -= 1
            self._runners_at_work.remove(runner)

    async def _serve(self, runner: Runner, woken: bool) -> None:
        ready = self._ready
        while True:
            if woken:
                self._waking -= 1
            woken = True
            while ready:
                key = ready.popleft()
                if ready:
                    self._wake_one()
                await self._run_lane(key, runner)
            event = anyio.Event()
            self._sleeping.append(event)
            try:
                await event.wait()
            except BaseException:
                if not event.is_set():
                    self._sleeping.remove(event)
                raise

    def cancel(self, entry_id: str) -> bool:
        """Cancel the run of ``entry_id`` (it was stopped); whether one was running."""
        for runner in self._runners_at_work:
            if runner.entry is not None and runner.entry.id == entry_id:
                runner.scope.cancel()
                return True
        return False

    async def _stopped_while_running(self, runner: Runner) -> None:
        """The run of ``runner.entry`` was cancelled: its lane stops at it, and the entry is
        set aside; resumed meanwhile, its lane goes on from it."""
        entry, key = runner.entry, runner.key
        runner.entry = None
        lane = self._lanes.get(key)
        if entry is None or not lane or lane[0] is not entry:  # dropped meanwhile
            return
        self._stop(key, lane)
        if not self._running():
            self._idle.set()
        if self._on_stopped is None or not await self._on_stopped(entry):
            self.resume(key)

    def _stop(self, key: LaneKey, lane: deque[RawEntry]) -> None:
        """``key``'s lane stops at its first entry. With refill, the entries behind it are
        spilled and the first no longer holds room: a waiting key holds none of it."""
        self.stopped_keys.add(key)
        if self._refill is None:
            return
        self._room.give(len(lane))
        if len(lane) > 1:
            self._spilled[key] = lane[1].id  # the lane holds a prefix: the rest follow it
            self._spill_count[key] = self._spill_count.get(key, 0) + len(lane) - 1
            while len(lane) > 1:
                lane.pop()

    async def _run_lane(self, key: LaneKey, runner: Runner) -> None:
        lane = self._lanes.get(key)
        if lane is None or key in self.stopped_keys:  # dropped or stopped meanwhile
            return
        slots, room = self._slots, self._room
        # one handler slot for the lane's run, not one per entry: under contention a slot
        # released per entry goes to another waiter and costs an event-loop pass each time,
        # with the slot idle meanwhile (a lane holds at most the partition's read entries)
        await slots.acquire()
        try:
            runner.key = key
            while self._lanes.get(key) is lane:  # not dropped meanwhile
                if not lane:
                    if key in self._spilled and await self._refilled(key, lane):
                        continue
                    return
                entry = runner.entry = lane[0]
                go_on = await self._run_entry(entry)
                runner.entry = None
                if go_on is not True:
                    if self._lanes.get(key) is lane:  # not dropped meanwhile
                        self._stop(key, lane)
                        if go_on is not False:
                            self._resume_later(key, go_on)
                    return
                lane.popleft()
                if self._lanes.get(key) is lane:  # not dropped meanwhile (drop_all gave it)
                    room.give(1)
                else:
                    return
        finally:
            slots.release()
            if not lane and self._lanes.get(key) is lane:
                del self._lanes[key]
            if not self._running():
                self._idle.set()

    async def _refilled(self, key: LaneKey, lane: deque[RawEntry]) -> bool:
        """Bring back the next of ``key``'s spilled entries into its empty lane: whether
        there may be more to run (False: none of the key is left)."""
        assert self._refill is not None
        start, self._spilled[key] = self._spilled[key], ""  # "": none read meanwhile
        want = min(self._per_key, max(1, self._spill_count.get(key, 1)))
        entries, rest = await self._refill(key, start, want)
        if self._lanes.get(key) is not lane:  # dropped meanwhile
            return False
        read_meanwhile = self._spilled.pop(key)
        # the count is never below what is left (each entry left pending was counted; one
        # deleted meanwhile was too): at 0 none is, however far the refill looked
        left = self._spill_count.pop(key, 0) - len(entries)
        if left > 0 and (rest is not None or read_meanwhile):
            self._spilled[key] = rest or read_meanwhile
            self._spill_count[key] = left
        lane.extend(entries)
        self._room.take(len(entries))
        return bool(lane) or key in self._spilled

    def _resume_later(self, key: LaneKey, later: Later) -> None:
        self._later[key] = token = _WakeUp(later.waits_for)
        self._tg.start_soon(self._wake_up, key, token, later)

    async def _wake_up(self, key: LaneKey, token: _WakeUp, later: Later) -> None:
        if later.until is None:
            await anyio.sleep(later.delay)
        else:
            with anyio.move_on_after(later.delay):
                await later.until()
        if self._later.get(key) is token:  # not resumed, dropped or stopped again meanwhile
            self.resume(key)

    def waiting(self) -> dict[str, int]:
        """The keys waiting for flow control, by reason (each waits at the entry it stopped
        at; the key's later entries wait behind it, for their order)."""
        counts: dict[str, int] = {}
        for wake_up in self._later.values():
            if wake_up.waits_for is not None:
                counts[wake_up.waits_for] = counts.get(wake_up.waits_for, 0) + 1
        return counts

    def _running(self) -> bool:
        # every stopped key has a lane (it stopped with entries left; drop_all clears both)
        return len(self._lanes) > len(self.stopped_keys)

    async def wait_idle(self) -> None:
        """Until no lane is running (stopped lanes do not count)."""
        if self._running():
            await self._idle.wait()

    def resume(self, key: LaneKey) -> None:
        """Let a stopped lane (a halted key) go on from the entry it stopped at."""
        self._later.pop(key, None)
        if key in self.stopped_keys:
            self.stopped_keys.discard(key)
            lane = self._lanes.get(key)
            if lane is not None:
                if self._refill is not None:  # its first entry holds room again
                    self._room.take(len(lane))
                self._ready.append(key)
                self._busy()
                self._wake_one()

    def _holding_room(self) -> int:
        """The entries of these lanes that hold room: with refill, a stopped lane holds
        none (its one entry, see :meth:`_stop`)."""
        stopped = self._spill_stopped
        return sum(len(lane) for key, lane in self._lanes.items() if key not in stopped)

    def drop_all(self) -> None:
        """Forget every queued entry (the partition was lost or is being left: they stay
        pending in Redis for the next owner) and give their room back."""
        self._room.give(self._holding_room())
        self._lanes.clear()
        self._ready.clear()
        self._spilled.clear()
        self._spill_count.clear()
        self._later.clear()
        self.stopped_keys.clear()
        self._idle.set()
