"""Which partitions this ordered consumer owns: membership heartbeat, balanced assignment,
leases acquired, renewed and released (the protocol of docs/guides/ordering.md).

:class:`Ownership` holds the decisions and no I/O of its own: the server is reached through
a :class:`LeaseStore` and time through a clock, both injected, so the protocol runs the
same against Redis (:class:`RedisLeases`) and against a model with a controlled clock in
the tests. Each :meth:`Ownership.tick` returns what changed; the consumer acts on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as aioredis

from ..errors import ServerUnavailableError
from ..wire import ownership as wire
from ..wire.ownership import Member
from .assignment import assign

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class LeaseStore(Protocol):
    """The server's side of the protocol, for one topic and group."""

    async def heartbeat(self, me: str, ttl: float, held: Sequence[int]) -> list[Member]: ...
    async def acquire(self, partition: int, me: str, ttl: float) -> int | None: ...
    async def renew(self, partition: int, me: str, token: int, ttl: float) -> bool: ...
    async def release(self, partition: int, me: str, token: int) -> bool: ...
    async def leave(self, me: str) -> None: ...


@dataclass(slots=True)
class Lease:
    """A lease this member holds: its fencing token and the local deadline before which
    it is surely still valid (the local time the acquire or renewal was *sent*, plus the
    lease: never later than the server's expiry)."""

    partition: int
    token: int
    deadline: float
    releasing: bool = False

    def valid(self, now: float) -> bool:
        return now < self.deadline


@dataclass(slots=True)
class Changes:
    """What one tick changed: partitions acquired (start them), to release (drain them,
    then :meth:`Ownership.release`), and lost (stop them at once: the lease lapsed)."""

    acquired: list[Lease] = field(default_factory=list)
    to_release: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)


class Ownership:
    def __init__(
        self, store: LeaseStore, me: str, partitions: int, ttl: float, clock: Clock
    ) -> None:
        self._store, self.me, self.partitions = store, me, partitions
        self.ttl, self._clock = ttl, clock
        self.leases: dict[int, Lease] = {}
        self.members: list[Member] = []
        self.rebalances = 0  # ticks whose assignment differed from what was held

    def valid(self, partition: int) -> bool:
        """Whether this member may still act on ``partition`` (no round trip)."""
        lease = self.leases.get(partition)
        return lease is not None and lease.valid(self._clock())

    async def tick(self, *, stopping: bool = False) -> Changes:
        """One round: drop lapsed leases, heartbeat, renew, then move towards the
        assignment (``stopping``: release everything, acquire nothing).

        Each call to the server stands on its own: on a cluster a master failing over
        (ServerUnavailableError) stalls only the leases on its slots. Without the
        heartbeat's answer (the membership's master fails) the membership is unknown: the
        leases held are renewed, nothing is acquired or given up."""
        changes = Changes()
        self._drop_lapsed(changes)
        try:
            self.members = await self._store.heartbeat(self.me, self.ttl, sorted(self.leases))
        except ServerUnavailableError as e:
            log.warning("%s: heartbeat failed, keeping its partitions: %s", self.me, e)
            await self._renew(changes)
            return changes
        await self._renew(changes)
        if stopping:
            target: set[int] = set()
        else:
            names = {m.name for m in self.members} | {self.me}
            held = {m.name: m.held for m in self.members}
            held[self.me] = frozenset(self.leases)
            target = assign(self.partitions, names, held).get(self.me, set())
        if target != set(self.leases):
            self.rebalances += 1
            log.debug("%s: assignment %s, holding %s", self.me, sorted(target), sorted(self.leases))
        for partition, lease in self.leases.items():
            if partition not in target and not lease.releasing:
                lease.releasing = True
                changes.to_release.append(partition)
        for partition in sorted(target - set(self.leases)):
            sent = self._clock()
            try:
                token = await self._store.acquire(partition, self.me, self.ttl)
            except ServerUnavailableError as e:  # the next tick tries again
                log.warning("%s: could not acquire partition %d: %s", self.me, partition, e)
                continue
            if token is not None:
                lease = self.leases[partition] = Lease(partition, token, sent + self.ttl)
                changes.acquired.append(lease)
        return changes

    def _drop_lapsed(self, changes: Changes) -> None:
        now = self._clock()
        for partition, lease in list(self.leases.items()):
            if not lease.valid(now):
                log.warning("lease of partition %d lapsed (token %d)", partition, lease.token)
                del self.leases[partition]
                changes.lost.append(partition)

    async def _renew(self, changes: Changes) -> None:
        for partition, lease in list(self.leases.items()):
            sent = self._clock()
            try:
                renewed = await self._store.renew(partition, self.me, lease.token, self.ttl)
            except ServerUnavailableError as e:  # it lapses unless a later tick renews it
                log.warning("lease of partition %d not renewed: %s", partition, e)
                continue
            if renewed:
                lease.deadline = sent + self.ttl
            elif self.leases.get(partition) is lease:  # (else given up meanwhile)
                log.warning("lease of partition %d lost (token %d)", partition, lease.token)
                del self.leases[partition]
                changes.lost.append(partition)

    async def release(self, partition: int) -> None:
        """Give ``partition`` up (its in-flight entries are finished or abandoned)."""
        lease = self.leases.pop(partition, None)
        if lease is not None:
            await self._store.release(partition, self.me, lease.token)

    def forget(self, partition: int, token: int | None = None) -> None:
        """Drop a lease found lost outside a tick (a fenced op was refused); ``token``:
        only that lease, not a newer one of the same partition."""
        lease = self.leases.get(partition)
        if lease is not None and token in (None, lease.token):
            del self.leases[partition]

    async def leave(self) -> None:
        for partition in list(self.leases):
            await self.release(partition)
        await self._store.leave(self.me)


class RedisLeases:
    """:class:`LeaseStore` on the server: membership on the topic's slot, each lease on
    its partition's."""

    def __init__(
        self,
        topic: str,
        streams: Sequence[str],
        group: str,
        client_for: Callable[[str], aioredis.Redis],
    ) -> None:
        self._topic, self._streams, self._group = topic, streams, group
        self._client_for = client_for

    async def heartbeat(self, me: str, ttl: float, held: Sequence[int]) -> list[Member]:
        client, partitioned = self._client_for(self._topic), len(self._streams) > 1
        return await wire.heartbeat(
            client, self._topic, self._group, me, ttl, held, partitioned=partitioned
        )

    async def acquire(self, partition: int, me: str, ttl: float) -> int | None:
        stream = self._streams[partition]
        return await wire.acquire(self._client_for(stream), stream, self._group, me, ttl)

    async def renew(self, partition: int, me: str, token: int, ttl: float) -> bool:
        stream = self._streams[partition]
        return await wire.renew(self._client_for(stream), stream, self._group, me, token, ttl)

    async def release(self, partition: int, me: str, token: int) -> bool:
        stream = self._streams[partition]
        return await wire.release(self._client_for(stream), stream, self._group, me, token)

    async def leave(self, me: str) -> None:
        await wire.leave(self._client_for(self._topic), self._topic, self._group, me)
