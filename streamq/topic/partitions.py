"""Partitioned topics: the partition streams' names, the key hash, the partition-qualified ID.

A topic with ``N`` partitions is stored as ``N`` streams. Partition ``i`` of topic ``T``
is the stream ``T:p<i>.<s>``, where ``s`` is the smallest integer (0, 1, ...) for which
the Redis Cluster slot of that name (CRC16 of the name, modulo 16384) falls in the
``i``-th of ``N`` equal slot ranges ``[i*16384//N, (i+1)*16384//N)``. Names carry no
braces, so each partition hashes on its whole name and its auxiliary keys
(``streamq:{T:p<i>.<s>}:...``) share its slot; and since a cluster's masters serve ranges of
slots, the partitions spread evenly over the masters (``{0}``..``{N-1}``-style tags would
crowd a few slots). On one node the names are just names.

A message's partition: ``zlib.crc32(key as UTF-8 bytes) % N`` when published with a key
(same key, same partition, order kept within it); without a key, the next partition in
turn. A producer in another language publishes to partition ``i`` with
``XADD <name of partition i> * type ... data ...``; the names are also recorded, with ``N``,
in the hash ``streamq:{T}:partitions`` (fields ``count`` and ``names``).

IDs: an entry of partition ``i`` is named ``"<i>:<ms>-<seq>"`` everywhere (``publish``'s
return value, ``Message.id``, dead letters, stop/resume, the CLI).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from .._ids import StreamId
from ..errors import ConfigError, InvalidMessageIdError, WrongTypeError
from ..wire.damage import set_aside
from ..wire.keys import Keys

# re-exported: the names every importer of this module used before they moved down
from ..wire.partition_names import MAX_PARTITIONS as MAX_PARTITIONS
from ..wire.partition_names import partition_for_key as partition_for_key
from ..wire.partition_names import partition_streams as partition_streams
from ..wire.partition_names import validate_partitions as validate_partitions
from ..wire.records import DamagedRecord, wrong_type
from ..wire.records import partition_count as read_partition_count
from ..wire.records import partition_names as read_partition_names
from ..wire.records import priority_count as read_priority_count
from ..wire.wrong_type import unless_wrong_type, unless_wrong_type_sync, wrong_type_of

# a partitions record of another type, as a listing reads it: the topic seems plain
_TAKEN_FOR_NONE = "the topic is taken for a plain stream without priorities"


@dataclass(frozen=True, slots=True)
class PartitionedId:
    """An entry ID with its partition: ``"3:1700000000000-0"``."""

    partition: int
    entry_id: str

    def __str__(self) -> str:
        return f"{self.partition}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str, partitions: int) -> PartitionedId:
        """Parse the text form; on a plain topic (one partition) a bare ID is partition 0.

        Raises InvalidMessageIdError naming what is wrong.
        """
        if not isinstance(text, str):
            raise InvalidMessageIdError(f"invalid entry ID {text!r}: expected a string")
        head, sep, rest = text.partition(":")
        if not sep:
            if partitions > 1:
                raise InvalidMessageIdError(
                    f"invalid entry ID {text!r}: this topic has {partitions} partitions, "
                    "so an ID names its partition: '<partition>:<ms>-<seq>'"
                )
            return cls(0, str(StreamId.parse(text)))
        if not head.isascii() or not head.isdigit() or int(head) >= partitions:
            raise InvalidMessageIdError(
                f"invalid entry ID {text!r}: no partition {head!r} (the topic has "
                f"{partitions}: 0..{partitions - 1})"
            )
        return cls(int(head), str(StreamId.parse(rest)))


async def check_partition_count(
    client: aioredis.Redis, topic: str, partitions: int, priorities: int = 1
) -> None:
    """Refuse to open ``topic`` with another partition count (or number of priority
    levels) than the one recorded; record them when the topic is opened for the first time
    (``client``: the topic's own slot). Raises ConfigError naming both counts, or naming
    the record when its key holds another type than a hash."""
    key = Keys(topic).partitions
    try:
        await _check_partition_count(client, topic, key, partitions, priorities)
    except WrongTypeError as e:
        raise _unreadable(topic, await wrong_type_of(client, "partitions", key, "hash")) from e


async def _check_partition_count(
    client: aioredis.Redis, topic: str, key: str, partitions: int, priorities: int
) -> None:
    validate_partitions(partitions)
    levels = _levels_for(topic, key, await client.hget(key, "priorities"), priorities)
    if levels is None and priorities > 1:
        if await client.exists(key) or await client.exists(topic):
            raise _without_levels(topic, priorities)
        await client.hsetnx(key, "priorities", priorities)
        levels = _levels(key, await client.hget(key, "priorities"))
    _check_levels(topic, key, levels or 1, priorities)
    recorded = _count(key, await client.hget(key, "count"))
    if recorded is None and partitions > 1:
        if await client.exists(topic):
            raise _plain_stream(topic, partitions)
        await client.hsetnx(key, "count", partitions)
        recorded = _count(key, await client.hget(key, "count"))
    if recorded is not None and recorded != partitions:
        raise _another_count(topic, key, recorded, partitions)
    if partitions > 1:  # also after an open that failed between the two writes
        await client.hsetnx(key, "names", _names(topic, partitions))


async def forget_partitions(
    client: aioredis.Redis, topic: str, also: Sequence[str] = (), *, keep_record: bool = False
) -> None:
    """Delete the record of a terminated partitioned topic, with ``also`` (keys of the
    topic's own slot) at once (``client``: the topic's slot); ``keep_record``: only
    ``also`` (the topic's dead letters were kept, and are found through the record)."""
    doomed = [*also] if keep_record else [Keys(topic).partitions, *also]
    if doomed:
        await client.delete(*doomed)


async def recorded_partitions(client: aioredis.Redis, topic: str) -> int:
    """The partition count recorded for ``topic`` (1: a plain stream, or nothing yet).
    A damaged count is taken from the streams' names recorded beside it when they are
    whole (one more read, only then)."""
    key = Keys(topic).partitions
    recorded = await unless_wrong_type(client.hget(key, "count"), client, "partitions", key,
                                       "hash", None, _TAKEN_FOR_NONE)  # fmt: skip
    count = read_partition_count(key, recorded)
    if isinstance(count, DamagedRecord):
        count = _recovered(topic, count, await client.hget(key, "names"))
    return count or 1


async def recorded_priorities(client: aioredis.Redis, topic: str) -> int:
    """The number of priority levels recorded for ``topic`` (1: none recorded)."""
    key = Keys(topic).partitions
    recorded = await unless_wrong_type(client.hget(key, "priorities"), client, "partitions",
                                       key, "hash", None, _TAKEN_FOR_NONE)  # fmt: skip
    return _levels(key, recorded) or 1


def recorded_priorities_sync(client: redis.Redis, topic: str) -> int:
    """The blocking twin of :func:`recorded_priorities`."""
    key = Keys(topic).partitions
    recorded = unless_wrong_type_sync(lambda: client.hget(key, "priorities"), client,
                                      "partitions", key, "hash", None, _TAKEN_FOR_NONE)  # fmt: skip
    return _levels(key, recorded) or 1


def recorded_partitions_sync(client: redis.Redis, topic: str) -> int | None:
    """The partition count recorded for ``topic``, None for a plain stream (a blocking
    ``client`` on the topic's own slot: Spark, scripts); a damaged count as above."""
    key = Keys(topic).partitions
    recorded = unless_wrong_type_sync(lambda: client.hget(key, "count"), client,
                                      "partitions", key, "hash", None, _TAKEN_FOR_NONE)  # fmt: skip
    count = read_partition_count(key, cast("bytes | None", recorded))
    if isinstance(count, DamagedRecord):
        count = _recovered(topic, count, cast("bytes | None", client.hget(key, "names")))
    return count


def check_partition_count_sync(
    client: redis.Redis, topic: str, partitions: int, priorities: int = 1
) -> None:
    """The blocking twin of :func:`check_partition_count` (same record, same errors)."""
    key = Keys(topic).partitions
    try:
        _check_partition_count_sync(client, topic, key, partitions, priorities)
    except WrongTypeError as e:
        found = wrong_type("partitions", key, "hash", cast("bytes", client.type(key)))
        raise _unreadable(topic, found) from e


def _check_partition_count_sync(
    client: redis.Redis, topic: str, key: str, partitions: int, priorities: int
) -> None:
    validate_partitions(partitions)
    levels = _levels_for(topic, key, client.hget(key, "priorities"), priorities)
    if levels is None and priorities > 1:
        if client.exists(key) or client.exists(topic):
            raise _without_levels(topic, priorities)
        client.hsetnx(key, "priorities", priorities)
        levels = _levels(key, client.hget(key, "priorities"))
    _check_levels(topic, key, levels or 1, priorities)
    recorded = _count(key, client.hget(key, "count"))
    if recorded is None and partitions > 1:
        if client.exists(topic):
            raise _plain_stream(topic, partitions)
        client.hsetnx(key, "count", partitions)
        recorded = _count(key, client.hget(key, "count"))
    if recorded is not None and recorded != partitions:
        raise _another_count(topic, key, recorded, partitions)
    if partitions > 1:  # also after an open that failed between the two writes
        client.hsetnx(key, "names", _names(topic, partitions))


def _count(key: str, recorded: Any) -> int | None:
    """The record's ``count`` field as read (bytes, or None where nothing is recorded); a
    damaged one is set aside (logged once) and taken for nothing recorded."""
    count = read_partition_count(key, cast("bytes | str | None", recorded))
    if isinstance(count, DamagedRecord):
        set_aside(count, "the topic's partition count is taken for not recorded")
        return None
    return count


def _levels(key: str, recorded: Any) -> int | None:
    """The record's ``priorities`` field as read; a damaged one is set aside (logged once)
    and taken for nothing recorded."""
    levels = read_priority_count(key, cast("bytes | str | None", recorded))
    if isinstance(levels, DamagedRecord):
        set_aside(levels, "the topic's number of priority levels is taken for not recorded")
        return None
    return levels


def _levels_for(topic: str, key: str, recorded: Any, priorities: int) -> int | None:
    """The record's ``priorities`` field as a queue of ``priorities`` levels opening the
    topic reads it: a damaged one is ConfigError naming it when levels are asked for (taken
    for none, the topic would seem unable to gain them), else set aside as by
    :func:`_levels`."""
    levels = read_priority_count(key, cast("bytes | str | None", recorded))
    if isinstance(levels, DamagedRecord) and priorities > 1:
        raise ConfigError(
            f"priorities={priorities}, but the topic {topic!r} has a {levels}: repair it "
            f"(HSET {key} priorities <levels>) or terminate the topic"
        )
    return _levels(key, recorded)


def _check_levels(topic: str, key: str, recorded: int, priorities: int) -> None:
    if recorded != priorities:
        raise ConfigError(
            f"topic {topic!r} has {recorded} priority level{'s' if recorded > 1 else ''} "
            f"(recorded in {key!r}), not {priorities}: pass priorities={recorded}"
        )


def _without_levels(topic: str, priorities: int) -> ConfigError:
    return ConfigError(
        f"priorities={priorities}, but {topic!r} exists without priorities: a topic "
        "cannot gain priority levels (publish to a new topic name instead)"
    )


def _recovered(topic: str, damaged: DamagedRecord, names: bytes | None) -> int | None:
    """The count the record's ``names`` give in place of its ``damaged`` count, else None
    (not recorded); the damaged count is set aside either way."""
    count = read_partition_names(damaged.key, topic, names)
    if isinstance(count, DamagedRecord):
        set_aside(damaged, "the topic's partition count is taken for not recorded")
        return None
    set_aside(damaged, f"the count of the partition names recorded beside it is used: {count}")
    return count


def _unreadable(topic: str, damaged: DamagedRecord) -> ConfigError:
    return ConfigError(
        f"cannot open the topic {topic!r}: its {damaged}: repair it (DEL {damaged.key}, then "
        "open the topic with its partition count) or terminate the topic"
    )


def _plain_stream(topic: str, partitions: int) -> ConfigError:
    return ConfigError(
        f"partitions={partitions}, but {topic!r} is a plain stream: a topic "
        "cannot become partitioned (publish to a new topic name instead)"
    )


def _another_count(topic: str, key: str, recorded: int, partitions: int) -> ConfigError:
    return ConfigError(
        f"topic {topic!r} has {recorded} partitions (recorded in {key!r}), "
        f"not {partitions}: pass partitions={recorded}"
    )


def _names(topic: str, partitions: int) -> str:
    """The ``names`` field of the record: the partition streams as a JSON list."""
    return json.dumps(list(partition_streams(topic, partitions)))
