"""Redis Cluster's key space: the slot of a key, and which node serves each slot.

Shared by the asyncio and the synchronous routers (:mod:`streamq.wire.routing`): this
module does no I/O. A slot table is rebuilt from a ``CLUSTER SLOTS`` reply and patched by
``MOVED`` replies in between (redis-py raises those as ``MovedError`` with the slot and the
new address).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.crc import key_slot

SLOTS = 16384

# What a node without cluster mode answers to CLUSTER SLOTS.
NOT_A_CLUSTER = "cluster support disabled"

Address = tuple[str, int]


def slot_of(key: str | bytes) -> int:
    """The cluster slot of ``key`` (the part between the first ``{`` and ``}`` if any)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


class SlotTable:
    """Slot → the address of the master serving it (None: nobody, e.g. mid-failover)."""

    def __init__(self) -> None:
        # made when a cluster's slots are first learnt: one node never needs the 16,384
        # entries (128 kB per deployment)
        self._owners: list[Address | None] | None = None

    def owner(self, slot: int) -> Address | None:
        return None if self._owners is None else self._owners[slot]

    def masters(self) -> list[Address]:
        """Every address that serves at least one slot, in slot order."""
        owners = self._owners or ()
        return list(dict.fromkeys(a for a in owners if a is not None))

    def move(self, slot: int, address: Address) -> None:
        if self._owners is None:
            self._owners = [None] * SLOTS
        self._owners[slot] = address

    def load(self, reply: Sequence[Any], asked: Address) -> None:
        """Replace the table with a ``CLUSTER SLOTS`` reply from the node at ``asked``."""
        owners: list[Address | None] = [None] * SLOTS
        for first, last, master, *_replicas in reply:
            address = node_address(master, asked)
            owners[int(first) : int(last) + 1] = [address] * (int(last) - int(first) + 1)
        self._owners = owners


def node_address(entry: Sequence[Any], asked: Address) -> Address:
    """``[host, port, id, ...]`` of a CLUSTER SLOTS reply; an empty or ``?`` host means
    "the node you asked" (a node that does not know its own address)."""
    raw = entry[0]
    host = raw.decode() if isinstance(raw, bytes) else str(raw)
    if host in ("", "?"):
        host = asked[0]
    return host, int(entry[1])
