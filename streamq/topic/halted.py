"""The record of halted keys (``on_poison="halt"``): a key whose entry failed
``max_deliveries`` times stops, with its later entries behind it, until an operator
releases it.

Each halted key is recorded in ``streamq:{<partition stream>}:halted`` (one hash for every
group, so that terminating the topic deletes it): field = JSON ``[group, key]`` (key
``null`` for the keyless entries of the partition), value = JSON ``{"id", "reason",
"action"}``. An operator releases it by setting ``action`` (:func:`release_key`):
``"skip"`` dead-letters the poison entry and the key goes on, ``"retry"`` runs it again with
a fresh delivery count. The partition's owner polls its halted keys and acts; the record
outlives an owner (the next one halts on the same entry, which is past ``max_deliveries``,
and keeps a release already asked for).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis

from ..wire import records
from ..wire.damage import set_aside
from ..wire.keys import Keys
from ..wire.records import DamagedRecord
from ..wire.wrong_type import unless_wrong_type

ACTIONS = ("skip", "retry")


def halted_key(stream: str) -> str:
    return Keys(stream).halted


def record_field(group: str, key: str | None) -> str:
    return json.dumps([group, key])


def lane_field(group: str, key: bytes | None) -> str:
    return record_field(group, None if key is None else key.decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class HaltedKey:
    """A halted key: the publish key (None: the keyless entries of the partition), the
    partition, the ID of the entry it halted on, why, and a release asked for (or None)."""

    key: str | None
    partition: int
    entry_id: str
    reason: str
    action: str | None


async def list_halted(
    client: aioredis.Redis, stream: str, group: str, partition: int
) -> list[HaltedKey]:
    every = await list_every_halted(client, stream, partition)
    return [halted for of_group, halted in every if of_group == group]


async def list_every_halted(
    client: aioredis.Redis, stream: str, partition: int
) -> list[tuple[str, HaltedKey]]:
    """The halted keys of every group of partition ``stream``, each with its group."""
    key = halted_key(stream)
    found = await unless_wrong_type(client.hgetall(key), client, "halted", key, "hash", {})
    return _parsed(stream, found, partition)


async def scan_every_halted(
    client: aioredis.Redis, stream: str, partition: int, cursor: int, count: int
) -> tuple[int, list[tuple[str, HaltedKey]]]:
    """About ``count`` halted keys of partition ``stream`` from the HSCAN cursor
    ``cursor``, each with its group, and the cursor that goes on (0: none left). Like
    HSCAN, a key halted or released meanwhile may be listed twice or not at all."""
    key = halted_key(stream)
    read = client.hscan(key, cursor, count=count)
    after, found = await unless_wrong_type(read, client, "halted", key, "hash", (0, {}))
    return int(after), _parsed(stream, found, partition)


async def each_halted(
    client: aioredis.Redis, stream: str, partition: int, count: int
) -> AsyncIterator[list[tuple[str, HaltedKey]]]:
    """The halted keys of every group of partition ``stream``, each with its group, about
    ``count`` at a time (one HSCAN call each: memory stays bounded whatever their number).
    Like HSCAN, a key halted or released meanwhile may be listed twice or not at all."""
    cursor = -1
    while cursor != 0:
        cursor, found = await scan_every_halted(client, stream, partition, max(cursor, 0), count)
        if found:
            yield found


def _parsed(stream: str, found: dict[bytes, bytes], partition: int) -> list[tuple[str, HaltedKey]]:
    """The halted records of ``found`` with their groups; a damaged one is set aside."""
    name = halted_key(stream)
    halted = []
    for field, value in found.items():
        record = records.halted(name, field, value)
        if isinstance(record, DamagedRecord):
            set_aside(record, "not listed")
            continue
        halted.append((record.group, HaltedKey(record.key, partition, record.entry_id,
                                               record.reason, record.action)))  # fmt: skip
    return halted


async def release_key(
    client: aioredis.Redis, stream: str, group: str, key: str | None, action: str
) -> bool:
    """Ask the owner to release halted ``key`` with ``action``; False if it is not halted."""
    field, name = record_field(group, key), halted_key(stream)
    value = await client.hget(name, field)
    if value is None:
        return False
    record = records.halted(name, field, value)
    if isinstance(record, DamagedRecord):  # its owner rewrites it when it halts again
        set_aside(record, "not released")
        return False
    written = {"id": record.entry_id, "reason": record.reason, "action": action}
    await client.hset(name, field, json.dumps(written))
    return True
