"""Flow control in shared mode: entries that may not run yet wait here, between the source
and the workers (:mod:`streamq.flow` holds the limits, pauses and throttles themselves).

An entry of a paused type, of a type over its rate limit, or of a throttled key or type
waits in this stage. It stays in flight (fetched, its lease kept fresh like every entry in
flight) but holds no worker, no handler slot and no unit of ``max_in_flight``: it is *set
aside* (:meth:`~.capacity.Capacity.set_aside`), so the reads go on and the other types
run while a paused or limited one waits. The stage keeps the fields of at most
``max_in_flight`` waiting entries; of the others it keeps the ID and reads the entry again
(``XRANGE``) when it may go. No delivery is counted while an entry waits; entries of one
type go on in the order they came. One task releases them: when a pause ends (the
:class:`~streamq.flow.gate.FlowGate`'s ``on_change``), when permits are granted (it sleeps
until the next permit, never polls faster), when a throttle ends. Released entries hold
their units again, so they go as ``max_in_flight`` has room: while more may go than there
is room for, the reads wait (:meth:`~.budget.Budget.hold_for_release`) and the stage is
woken as the handlers finish entries. The handlers' queue is never longer than
``max_in_flight``, after a resume too, and so a pause stops the handlers as soon as it
would have with nothing set aside. Past ``aside_limit`` waiting entries
(:data:`~.capacity.ASIDE_PER_UNIT` per unit of ``max_in_flight``) a waiting entry holds
its unit again, and the reads slow down; it gives its unit back as set-aside entries go.

A handler that raises :class:`~streamq.Throttle` holds back its key (or type) in the group
(the record on the server) and here; the entry waits here and runs again after it, its
delivery not counted, and so do that key's entries queued for the handlers already
(:meth:`FlowStage.holds`: as a paused type's). The group's other consumers see the record
when they next ask for entries of that type (:meth:`FlowStage.admit` reads the records of
a type it knows to be throttled, or that it has limits for). With nothing paused, limited
or throttled, :meth:`FlowStage.admit` returns its input: one check per read.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskStatus

from .._ids import StreamId
from .._log_summary import LogSummary
from ..errors import RedisFailure
from ..flow.gate import FlowGate
from ..message import Message, RawEntry
from ..signals import Throttle
from .capacity import Capacity
from .flow_parking import Fetch, Item, Parking, Waiting
from .routes import Route, Routes
from .timing import POLL_INTERVAL, READ_ERROR_BACKOFF

log = logging.getLogger(__name__)

THROTTLES_LOOKED_UP_EVERY = 1.0  # seconds: a throttle reaches every consumer within it
# what the entries of a type need, decided once per read (FlowStage.admit)
_GO, _PARK, _LIMITED, _LIMITED_BY_KEY = range(4)
WAITING_REASONS = ("pause", "rate_limit", "throttle")
RateKey = Callable[[Route, RawEntry, str | None], str | None]  # (route, entry, publish key)


class FlowStage:
    """The waiting entries of one consumer (a partition's), released to ``hand_off``."""

    def __init__(
        self,
        gate: FlowGate,
        hand_off: Callable[[list[Item]], None],
        routes: Routes,
        message: Callable[[Route, RawEntry], Message[Any]],
        summary: LogSummary,
        capacity: Capacity,
        fetch: Fetch,
        forget: Callable[[str], None],
    ) -> None:
        """``forget(id)``: an entry deleted while it waited (acked, as a handled one)."""
        self._gate, self._hand_off, self._routes, self._summary = gate, hand_off, routes, summary
        self._capacity, self._parking = capacity, Parking(capacity, fetch, forget)
        self._limited = frozenset(gate.config.rate_limits)
        self._rate_key: RateKey = lambda route, entry, key: None  # no key without limits
        if self._limited:  # loaded on first use: without rate limits no entry has a rate key
            from .rate_keys import rate_key_of

            self._rate_key = partial(rate_key_of, gate, message=message, summary=summary)
        self._parked: dict[str, deque[Waiting]] = {}  # type -> its waiting entries, in order
        self._type_until: dict[str, float] = {}  # type -> throttled until (event loop clock)
        self._key_until: dict[tuple[str, str | None], float] = {}  # (type, key) -> until
        self._known_throttled: set[str] = set()  # types whose throttle records are read
        self._wake = anyio.Event()
        self._due = 0  # entries ready past the room (Budget.hold_for_release)
        self._short = 0  # the same, counted during one round of releases
        self.requeued: set[str] = set()  # entries a Throttle sent back here: not finished
        self.waiting = dict.fromkeys(WAITING_REASONS, 0)  # entries waiting, by reason
        self.pauses, self.throttling = gate.pauses, False  # looked at per entry: see holds

    def wake(self) -> None:
        self._wake.set()

    def active(self) -> bool:
        """Whether some entry may have to wait (else :meth:`admit` is not needed)."""
        return bool(
            self._parked or self._limited or self._known_throttled or self._gate.pauses.targets
        )

    # -- entering -------------------------------------------------------------------
    async def admit(self, items: list[Item]) -> list[Item]:
        """The items that may go to the workers now; the others wait here. Entries of a
        limited type that nothing else holds back take their permits here, one take per
        rate key of the read: under a limit that does not bind they go on at once. What
        an entry's type needs is decided once per type and read (a read is mostly one
        type): a few operations per entry."""
        go: list[Item] = []
        asking: dict[tuple[str, str | None], list[Item]] = {}
        decided: dict[str, int] = {}
        last: Route | None = None  # the route of the item before: most items are its type's
        how, bucket = _GO, go
        for item in items:
            entry, route = item
            if route is None:
                go.append(item)
                continue
            if route is not last:
                last, type_name = route, route.type_name
                how = decided.get(type_name, -1)
                if how < 0:
                    how = decided[type_name] = self._decide(type_name)
                bucket = asking.setdefault((type_name, None), []) if how == _LIMITED else go
            if how in (_GO, _LIMITED):
                bucket.append(item)
            elif how == _PARK:
                self._park(entry, route)
                self._wake.set()
            else:
                key = entry.fields.get(b"key")
                publish_key = None if key is None else key.decode("utf-8", "replace")
                rate_key = self._rate_key(route, entry, publish_key)
                asking.setdefault((route.type_name, rate_key), []).append(item)
        for (type_name, rate_key), group in asking.items():
            granted = await self._granted_now(type_name, rate_key, len(group))
            go.extend(group[:granted])
            for entry, route in group[granted:]:  # the rest wait for their permits
                assert route is not None  # a limited type's
                self._park(entry, route)
                self._wake.set()
        return go

    def _decide(self, type_name: str) -> int:
        """What the entries of ``type_name`` need now: go, wait here, or permits."""
        if type_name in self._parked or type_name in self._known_throttled:
            return _PARK  # behind the type's waiting entries, or throttled
        if self._gate.paused(type_name):
            return _PARK
        limit = self._gate.config.rate_limits.get(type_name)
        if limit is None:
            return _GO
        return _LIMITED if limit.by is None else _LIMITED_BY_KEY

    async def _granted_now(self, type_name: str, rate_key: str | None, count: int) -> int:
        try:
            return (await self._gate.take(type_name, rate_key, count)).granted
        except RedisFailure:  # the server away: they wait, and the stage asks again
            return 0

    def _park(self, entry: RawEntry, route: Route, not_before: float = 0.0) -> None:
        publish_key = entry.fields.get(b"key")
        key = None if publish_key is None else publish_key.decode("utf-8", "replace")
        waiting = Waiting(entry, route, key, self._rate_key(route, entry, key), not_before)
        self._parking.park(waiting)
        self._parked.setdefault(route.type_name, deque()).append(waiting)

    async def requeue(self, entry: RawEntry, signal: Throttle) -> None:
        """A handler raised ``signal`` for ``entry``: hold back its key (or type) in the
        group and here, and let the entry wait until the throttle is over."""
        route = self._routes.by_type_field.get(entry.fields.get(b"type", b""))
        assert route is not None  # its handler raised the signal
        key = entry.fields.get(b"key")
        publish_key = None if key is None else key.decode("utf-8", "replace")
        seconds = await self._gate.throttle(route.type_name, publish_key, signal)
        until = anyio.current_time() + seconds
        self._note_throttle(route.type_name, publish_key, signal.scope, until)
        self.requeued.add(entry.id)
        self._park(entry, route, not_before=until)
        self._wake.set()

    def holds(self, entry: RawEntry, route: Route) -> bool:
        """Whether ``entry``, queued for the handlers before its type was paused or its key
        or type throttled here, must wait now (a worker asks, when :attr:`pauses` has
        targets or :attr:`throttling`, before it calls the handler)."""
        type_name = route.type_name
        if self._gate.paused(type_name):
            return True
        now = anyio.current_time()
        if self._type_until.get(type_name, 0.0) > now:
            return True
        key = entry.fields.get(b"key")
        publish_key = None if key is None else key.decode("utf-8", "replace")
        return self._key_until.get((type_name, publish_key), 0.0) > now

    def hold_back(self, entry: RawEntry, route: Route) -> None:
        """``entry`` (see :meth:`holds`) waits here, in ID order among its type's waiting
        entries, holding no handler slot and no unit of ``max_in_flight``."""
        self._park(entry, route)
        queue, entry_id = self._parked[route.type_name], StreamId.parse(entry.id)
        waiting = queue.pop()  # read before the entries parked since: it goes before them
        later = (i for i, w in enumerate(queue) if StreamId.parse(w.entry.id) > entry_id)
        queue.insert(next(later, len(queue)), waiting)
        self._wake.set()

    def _note_throttle(self, type_name: str, key: str | None, scope: str, until: float) -> None:
        self._known_throttled.add(type_name)
        self.throttling = True
        if scope == "type":
            self._type_until[type_name] = max(until, self._type_until.get(type_name, 0.0))
        else:
            self._key_until[type_name, key] = max(until, self._key_until.get((type_name, key), 0.0))

    # -- releasing ------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Release waiting entries as they may go, until cancelled (ready once the group's
        throttles were first looked up: the consumer reads nothing before)."""
        await self.learn_throttles()
        next_throttles = anyio.current_time() + THROTTLES_LOOKED_UP_EVERY
        budget = self._capacity.budget
        budget.join(self.wake)
        task_status.started()
        try:
            while True:
                next_throttles = await self._round(next_throttles)
        finally:
            budget.leave(self.wake, self._due)
            self._due = 0

    async def _round(self, next_throttles: float) -> float:
        """Release what may go, then wait until more may (or the stage is woken); when
        the group's throttles are next looked up."""
        next_look, budget = math.inf, self._capacity.budget
        if anyio.current_time() >= next_throttles:  # throttles set by other consumers
            await self.learn_throttles()
            next_throttles = anyio.current_time() + THROTTLES_LOOKED_UP_EVERY
        self._short = 0
        for type_name in list(self._parked):
            try:
                next_look = min(next_look, await self._release(type_name))
            except RedisFailure as e:
                self._summary.log(
                    log, "flow-control checks failed", logging.WARNING,
                    "flow control could not be checked (entries wait): %s", e,
                )  # fmt: skip
                next_look = min(next_look, READ_ERROR_BACKOFF)
            if not self._parked.get(type_name, True):
                del self._parked[type_name]
        self._count_waiting()
        budget.hold_for_release(self._short - self._due)  # the reads wait for what is ready
        self._due = self._short
        # short of room: woken once enough is free (Budget.wake), unless it is already
        if self._wake.is_set() or (self._due and budget.free() >= budget.low_water):
            self._wake = anyio.Event()
            return next_throttles
        wait = max(0.0, min(next_look, next_throttles - anyio.current_time()))
        with anyio.move_on_after(wait):
            await self._wake.wait()
        self._wake = anyio.Event()
        return next_throttles

    async def learn_throttles(self) -> None:
        """Look up which of this consumer's types some consumer of the group throttled:
        their entries are then checked against the throttle records (one round trip a
        second, whatever the types). A type whose throttles all ended goes back to the
        fast path, and ended throttles are forgotten."""
        try:
            found = await self._gate.throttled_types(self._routes.by_name)
        except RedisFailure as e:
            self._summary.log(
                log, "flow-control checks failed", logging.WARNING,
                "flow control could not be checked (entries wait): %s", e,
            )  # fmt: skip
            return
        now = anyio.current_time()  # what ended is forgotten: its type is fast again
        self._key_until = {k: until for k, until in self._key_until.items() if until > now}
        self._type_until = {t: until for t, until in self._type_until.items() if until > now}
        self.throttling = bool(self._key_until or self._type_until)
        ours = {t for t, _ in self._key_until} | set(self._type_until)
        self._known_throttled = set(found) | ours

    async def _release(self, type_name: str) -> float:
        """Hand off what of ``type_name`` may go now; seconds until more may."""
        queue = self._parked[type_name]
        if self._gate.paused(type_name):
            return POLL_INTERVAL  # the gate's on_change wakes the stage at once as well
        now = anyio.current_time()
        await self._read_throttles(type_name, queue, now)
        type_until = self._type_until.get(type_name, 0.0)
        if type_until > now:
            return type_until - now
        ready, wait, short = self._unthrottled(type_name, queue, now)
        asked, budget = len(ready), self._capacity.budget
        budget.reserve(asked)  # while permits are asked and entries read again: the other
        try:  # partitions' stages see this room taken
            if type_name in self._limited and ready:
                ready, rate_wait = await self._granted(type_name, ready)
                wait = min(wait, rate_wait)
                short = short and len(ready) == asked  # else the permits hold the rest back
            if short:  # the rest go as the handlers finish entries (Budget.wake)
                self._short += len(queue) - len(ready)
            if ready:
                await self._go(type_name, ready)  # the server away: they stay, and go later
        finally:
            budget.release(asked)
        return wait

    async def _go(self, type_name: str, ready: list[Waiting]) -> None:
        """Hand ``ready`` (of ``type_name``, first in its queue) to the workers: they hold
        their units of ``max_in_flight`` again. Paused while they were read again, they
        stay."""
        fetched = await self._parking.read_again(ready)
        if self._gate.paused(type_name):
            return
        items = self._parking.unpark(ready, fetched)
        for waiting in ready:
            self.requeued.discard(waiting.entry.id)
        self._parked[type_name] = _without(self._parked[type_name], ready)
        self._hand_off(items)

    async def _read_throttles(self, type_name: str, queue: deque[Waiting], now: float) -> None:
        """Learn the group's throttles of the waiting keys (set by any consumer)."""
        if type_name not in self._known_throttled:  # no throttle of it seen: nothing to read
            return
        keys = {w.publish_key for w in queue}
        found = await self._gate.throttled(type_name, keys)
        for key, seconds in found.items():
            if seconds > 0:
                self._note_throttle(type_name, key, "key", now + seconds)

    def _unthrottled(
        self, type_name: str, queue: deque[Waiting], now: float
    ) -> tuple[list[Waiting], float, bool]:
        """The waiting entries whose key (and own throttle) lets them go, in order, as
        many as there is room for; the seconds until the next throttled one may; whether
        more could go than there is room for (then the wait is not looked for)."""
        ready: list[Waiting] = []
        wait, room = math.inf, self._parking.room()
        key_until = self._key_until
        for waiting in queue:
            if waiting.not_before or key_until:
                key = type_name, waiting.publish_key
                until = max(waiting.not_before, key_until.get(key, 0.0))
                if until > now:
                    wait = min(wait, until - now)
                    continue
            if len(ready) >= room:
                return ready, wait, True
            ready.append(waiting)
        return ready, wait, False

    async def _granted(self, type_name: str, ready: list[Waiting]) -> tuple[list[Waiting], float]:
        """Of ``ready``, those the rate limit lets go now (per rate key, in order), and the
        seconds until its next permit."""
        counts: dict[str | None, int] = {}
        for waiting in ready:
            counts[waiting.rate_key] = counts.get(waiting.rate_key, 0) + 1
        allowed, wait = {}, math.inf
        for rate_key, count in counts.items():
            grant = await self._gate.take(type_name, rate_key, count)
            allowed[rate_key] = grant.granted
            if grant.granted < count:
                wait = min(wait, max(grant.wait_seconds, 0.001))
        granted = []
        for waiting in ready:
            if allowed[waiting.rate_key] > 0:
                allowed[waiting.rate_key] -= 1
                granted.append(waiting)
        return granted, wait

    def _count_waiting(self) -> None:
        """The gauge of waiting entries by reason (``mq.stats()["waiting"]``)."""
        counts = dict.fromkeys(WAITING_REASONS, 0)
        now = anyio.current_time()
        for type_name, queue in self._parked.items():
            if self._gate.paused(type_name):
                counts["pause"] += len(queue)
                continue
            if not (self.requeued or self._key_until or type_name in self._type_until):
                counts["rate_limit"] += len(queue)  # nothing throttled: a count, no scan
                continue
            for waiting in queue:
                key_until = self._key_until.get((type_name, waiting.publish_key), 0.0)
                throttled = max(waiting.not_before, key_until, self._type_until.get(type_name, 0.0))
                counts["throttle" if throttled > now else "rate_limit"] += 1
        self.waiting = counts


def _without(queue: deque[Waiting], gone: list[Waiting]) -> deque[Waiting]:
    """``queue`` without ``gone`` (mostly its first entries: then no copy is made)."""
    if all(a is b for a, b in zip(queue, gone, strict=False)):
        for _ in gone:
            queue.popleft()
        return queue
    chosen = {id(w) for w in gone}
    return deque(w for w in queue if id(w) not in chosen)
