"""Which live member of an ordered group owns which partition: one pure rule that every
member computes alike from the same input (the live members and what each holds now).

Balanced: with N members and P partitions each owns ⌊P/N⌋ or ⌈P/N⌉. Sticky: a member keeps
what it holds up to its quota, and the ``P mod N`` members allowed ⌈P/N⌉ are those holding
the most, so a join, leave or death moves only the partitions that must move. What is left
goes by rendezvous hashing (the member ranking the partition highest, among those with
room), so the result does not depend on the order members were seen in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping


def weight(partition: int, member: str) -> int:
    """The rendezvous weight of ``member`` for ``partition`` (stable across processes and
    Python versions: not ``hash()``)."""
    digest = hashlib.blake2b(f"{partition}\x00{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(
    partitions: int, members: Collection[str], held: Mapping[str, Collection[int]]
) -> dict[str, set[int]]:
    """Member -> the partitions it should own. ``held``: what each member holds now (as
    its heartbeat says; members not in ``members`` and partitions out of range are
    ignored, and a partition claimed by two members counts for the first by name)."""
    if not members:
        return {}
    names = sorted(set(members))
    current = _current(partitions, names, held)
    quota = _quotas(partitions, names, current)
    owned: dict[str, set[int]] = {name: set() for name in names}
    for name in names:  # keep what is held, up to the quota, the best-ranked first
        kept = sorted(current[name], key=lambda p: weight(p, name), reverse=True)
        owned[name].update(kept[: quota[name]])
    taken = set().union(*owned.values())
    for partition in range(partitions):
        if partition in taken:
            continue
        room = [name for name in names if len(owned[name]) < quota[name]]
        best = max(room, key=lambda name: (weight(partition, name), name))
        owned[best].add(partition)
    return owned


def _current(
    partitions: int, names: list[str], held: Mapping[str, Collection[int]]
) -> dict[str, set[int]]:
    """What each live member holds, each partition counted once (the first by name)."""
    seen: set[int] = set()
    current: dict[str, set[int]] = {}
    for name in names:
        mine = {p for p in held.get(name, ()) if 0 <= p < partitions and p not in seen}
        seen |= mine
        current[name] = mine
    return current


def _quotas(partitions: int, names: list[str], current: Mapping[str, set[int]]) -> dict[str, int]:
    """⌊P/N⌋ each, plus one for the ``P mod N`` members holding the most (ties by name)."""
    floor, extra = divmod(partitions, len(names))
    by_holding = sorted(names, key=lambda name: (-len(current[name]), name))
    bigger = set(by_holding[:extra])
    return {name: floor + (name in bigger) for name in names}


def moved(before: Mapping[str, Collection[int]], after: Mapping[str, Collection[int]]) -> int:
    """How many partitions changed owner between two assignments (for tests and metrics)."""
    owner_before = {p: m for m, ps in before.items() for p in ps}
    owner_after = {p: m for m, ps in after.items() for p in ps}
    return sum(1 for p, m in owner_after.items() if owner_before.get(p) not in (None, m))
