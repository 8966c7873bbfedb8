"""The ownership protocol of ordered consumption without a server: the assignment rule as a
pure function, and :class:`Ownership` driven through joins, leaves, deaths and pauses by a
controlled clock against a model of the lease scripts (the same rules as
:mod:`streamq.wire.ownership`), so the races are exercised step by step, not by chance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from streamq import ServerUnavailableError
from streamq.consume.assignment import assign, moved
from streamq.consume.ownership import Ownership
from streamq.wire.ownership import Member

pytestmark = pytest.mark.anyio


def _loads(result: dict[str, set[int]]) -> list[int]:
    return sorted(len(ps) for ps in result.values())


@pytest.mark.parametrize(("partitions", "members"), [(8, 3), (8, 8), (3, 5), (16, 5), (1, 2)])
def test_every_partition_has_one_owner_and_loads_are_balanced(
    partitions: int, members: int
) -> None:
    names = [f"m{i}" for i in range(members)]
    result = assign(partitions, names, {})
    owners = [p for ps in result.values() for p in ps]
    assert sorted(owners) == list(range(partitions))
    low, high = partitions // members, -(-partitions // members)
    assert all(low <= n <= high for n in _loads(result))


def test_the_rule_does_not_depend_on_the_order_members_are_seen_in() -> None:
    held = {"b": {1, 2}, "a": {0}}
    assert assign(6, ["a", "b", "c"], held) == assign(
        6, ["c", "b", "a"], dict(reversed(held.items()))
    )


def test_a_join_moves_only_what_the_newcomer_gets() -> None:
    before = assign(8, ["a", "b"], {})
    after = assign(8, ["a", "b", "c"], before)
    assert moved(before, after) == len(after["c"]) in (2, 3)
    assert after["a"] <= before["a"] and after["b"] <= before["b"]
    assert assign(8, ["a", "b", "c"], after) == after  # stable once reached


def test_a_leave_moves_only_the_leavers_partitions() -> None:
    before = assign(9, ["a", "b", "c"], {})
    after = assign(9, ["a", "b"], {k: v for k, v in before.items() if k != "c"})
    assert before["a"] <= after["a"] and before["b"] <= after["b"]
    assert moved(before, after) == len(before["c"])  # c's went to a and b, nothing else
    assert _loads(after) == [4, 5]


def test_a_partition_reported_by_two_members_is_counted_once() -> None:
    result = assign(2, ["a", "b"], {"a": {0}, "b": {0}})
    assert result == {"a": {0}, "b": {1}}


# -- the protocol under a controlled clock -------------------------------------------------


@dataclass
class _Held:
    consumer: str
    token: int
    expires: float


class ModelLeases:
    """The lease scripts' rules over an in-memory table and the test's clock."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.members: dict[str, tuple[float, frozenset[int]]] = {}
        self.leases: dict[int, _Held] = {}
        self.tokens: dict[int, int] = {}
        # what a failing cluster master serves ("members": the topic's slot; partitions)
        self.down: set[int | str] = set()

    def now(self) -> float:
        return self.clock[0]

    def _reach(self, what: int | str) -> None:
        if what in self.down:
            raise ServerUnavailableError(f"the cluster is reconfiguring (the master of {what})")

    async def heartbeat(self, me: str, ttl: float, held: Sequence[int]) -> list[Member]:
        self._reach("members")
        self.members[me] = (self.now() + ttl, frozenset(held))
        self.members = {k: v for k, v in self.members.items() if v[0] > self.now()}
        return [Member(k, v[1]) for k, v in self.members.items()]

    async def acquire(self, partition: int, me: str, ttl: float) -> int | None:
        self._reach(partition)
        lease = self.leases.get(partition)
        if lease and lease.consumer != me and lease.expires > self.now():
            return None
        token = self.tokens[partition] = self.tokens.get(partition, 0) + 1
        self.leases[partition] = _Held(me, token, self.now() + ttl)
        return token

    def _valid(self, partition: int, me: str, token: int) -> bool:
        lease = self.leases.get(partition)
        return bool(
            lease and (lease.consumer, lease.token) == (me, token) and lease.expires > self.now()
        )

    async def renew(self, partition: int, me: str, token: int, ttl: float) -> bool:
        self._reach(partition)
        if not self._valid(partition, me, token):
            return False
        self.leases[partition].expires = self.now() + ttl
        return True

    async def release(self, partition: int, me: str, token: int) -> bool:
        lease = self.leases.get(partition)
        if not lease or (lease.consumer, lease.token) != (me, token):
            return False
        lease.expires = 0
        return True

    async def leave(self, me: str) -> None:
        self.members.pop(me, None)


TTL = 3.0


class World:
    def __init__(self, partitions: int = 6) -> None:
        self.clock = [1000.0]
        self.store = ModelLeases(self.clock)
        self.partitions = partitions
        self.members: dict[str, Ownership] = {}

    def join(self, name: str) -> Ownership:
        member = Ownership(self.store, name, self.partitions, TTL, lambda: self.clock[0])
        self.members[name] = member
        return member

    def check_one_owner(self) -> None:
        """The safety property: at no time do two members think they may act on one
        partition, and whoever thinks so holds the server's lease with its token."""
        for p in range(self.partitions):
            acting = [m for m in self.members.values() if m.valid(p)]
            assert len(acting) <= 1, f"partition {p} acted on by {[m.me for m in acting]}"
            for m in acting:
                assert self.store._valid(p, m.me, m.leases[p].token)

    async def run(
        self, seconds: float, *, live: Sequence[str] | None = None, step: float = 0.25
    ) -> None:
        """Advance the clock; every live member ticks each step and releases at once what
        it is asked to release (its in-flight entries finish instantly here)."""
        end = self.clock[0] + seconds
        while self.clock[0] < end:
            for name, member in self.members.items():
                if live is not None and name not in live:
                    continue
                try:
                    changes = await member.tick()
                except ServerUnavailableError:  # as the ordered consumer: the next tick
                    continue
                for p in changes.to_release:
                    await member.release(p)
                self.check_one_owner()
            self.clock[0] += step
            self.check_one_owner()

    def owners(self, live: Sequence[str] | None = None) -> dict[str, set[int]]:
        return {
            name: {p for p in m.leases if m.valid(p)}
            for name, m in self.members.items()
            if live is None or name in live
        }


def _balanced(owners: dict[str, set[int]], partitions: int) -> bool:
    everything = sorted(p for ps in owners.values() for p in ps)
    n = len(owners)
    return everything == list(range(partitions)) and all(
        partitions // n <= len(ps) <= -(-partitions // n) for ps in owners.values()
    )


async def test_joins_converge_to_a_balanced_assignment_moving_only_what_must_move() -> None:
    world = World(6)
    world.join("a")
    await world.run(1)
    assert world.owners() == {"a": set(range(6))}
    world.join("b")
    await world.run(2)
    first = world.owners()
    assert _balanced(first, 6)
    world.join("c")
    await world.run(2)
    second = world.owners()
    assert _balanced(second, 6)
    assert second["a"] <= first["a"] and second["b"] <= first["b"]  # only c's share moved


async def test_a_graceful_leave_hands_over_at_once() -> None:
    world = World(6)
    world.join("a")
    b = world.join("b")
    await world.run(2)
    await b.leave()
    del world.members["b"]
    await world.run(0.5)  # within a tick or two, far under the lease
    assert world.owners() == {"a": set(range(6))}


async def test_a_dead_members_partitions_move_only_after_its_lease_expired() -> None:
    world = World(6)
    world.join("a"), world.join("b")
    await world.run(2)
    b_held = world.owners()["b"]
    died_at = world.clock[0]
    # b stops ticking (SIGKILL); a takes b's partitions, but not before the leases expire
    while world.owners(["a"])["a"] != set(range(6)):
        await world.run(0.25, live=["a"])
        if world.clock[0] < died_at + TTL - 0.25:
            assert not (world.owners(["a"])["a"] & b_held), "taken before the lease expired"
    assert world.clock[0] <= died_at + TTL + 1.0  # within the lease plus a second


async def test_a_member_paused_past_its_lease_acts_on_nothing_when_it_wakes() -> None:
    world = World(4)
    world.join("a")
    b = world.join("b")
    await world.run(2)
    b_held = set(b.leases)
    assert b_held
    await world.run(TTL + 1, live=["a"])  # b is paused (SIGSTOP): it neither ticks nor acts
    assert world.owners(["a"])["a"] == set(range(4))
    # b wakes: before any round trip it already knows its leases lapsed
    assert not any(b.valid(p) for p in b_held)
    changes = await b.tick()
    assert set(changes.lost) == b_held
    await world.run(2)
    assert _balanced(world.owners(), 4)  # b rejoined as a new member and got a share back
    assert all(world.store.tokens[p] >= 2 for p in b_held)  # with new fencing tokens


async def test_a_member_whose_renewals_fail_drops_its_partitions_before_another_takes_them() -> (
    None
):
    world = World(2)
    world.join("a")
    b = world.join("b")
    await world.run(2)
    # b's server calls stall (a partition between b and the server) while its clock runs
    stalled_at = world.clock[0]
    while world.clock[0] < stalled_at + TTL + 1:
        await world.run(0.25, live=["a"])
        if any(b.valid(p) for p in range(2)):
            assert world.clock[0] < stalled_at + TTL
    assert world.owners(["a"])["a"] == {0, 1}


async def test_a_failing_master_stalls_only_the_leases_it_serves() -> None:
    """A cluster master fails over for longer than the lease: it serves the membership (the
    topic's slot) and one partition. Only that partition's lease lapses; the others are
    renewed all along (never lost, never taken, same tokens), and once the master is back
    the lapsed one is taken again and the assignment is whole."""
    world = World(4)
    a, b = world.join("a"), world.join("b")
    await world.run(2)
    before = {name: dict(m.leases) for name, m in world.members.items()}
    failing = min(a.leases)
    world.store.down = {"members", failing}
    await world.run(2 * TTL)
    for name, member in world.members.items():
        kept = {p: lease.token for p, lease in before[name].items() if p != failing}
        now = {p: lease.token for p, lease in member.leases.items() if member.valid(p)}
        assert now == kept, f"{name} held {kept} with these tokens, holds {now} after the failover"
    world.store.down = set()
    await world.run(2)
    assert _balanced(world.owners(), 4), world.owners()
    assert b.leases.keys() == before["b"].keys()  # b's partitions never moved


async def test_a_lease_given_up_while_its_renewal_is_under_way_is_not_dropped_twice() -> None:
    """A worker gives its partition up (a fenced op was refused, or it was released) while
    the round's renewal of that lease awaits the server: the refused renewal finds the lease
    gone already, and the round goes on (it used to die on a KeyError, and the consumer
    with it); the partition is acquired again with a new token."""
    world = World(2)
    a = world.join("a")
    await world.run(1)
    given_up, token = min(a.leases), a.leases[min(a.leases)].token
    store, renew = world.store, world.store.renew

    async def given_up_meanwhile(partition: int, me: str, token: int, ttl: float) -> bool:
        if partition == given_up:
            a.forget(partition, token)
            await store.release(partition, me, token)
        return await renew(partition, me, token, ttl)

    store.renew = given_up_meanwhile  # type: ignore[method-assign]
    changes = await a.tick()
    assert [lease.partition for lease in changes.acquired] == [given_up]
    assert a.leases[given_up].token > token
