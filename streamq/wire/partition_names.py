"""The names of a topic's partition streams and the partition of a key: pure maths, no I/O.

Below :mod:`streamq.topic.partitions` (which records partitions on the server and names
partition-qualified IDs) so that the Redis boundary (:mod:`streamq.wire.permissions`) can
name a topic's streams without importing the topic layer. The scheme is described there.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

from ..errors import ConfigError
from .slots import SLOTS, slot_of

MAX_PARTITIONS = 1024


def validate_partitions(partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ConfigError(f"partitions must be an int, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    return partitions


@functools.lru_cache(maxsize=64)
def partition_streams(topic: str, partitions: int) -> tuple[str, ...]:
    """The stream of each partition of ``topic`` (a plain topic: the topic itself).

    Raises ConfigError past :data:`MAX_PARTITIONS` (a name is searched per slot range, and
    past 16,384 ranges some are empty)."""
    validate_partitions(partitions)
    if partitions == 1:
        return (topic,)
    return tuple(_partition_stream(topic, i, partitions) for i in range(partitions))


def _partition_stream(topic: str, index: int, partitions: int) -> str:
    low, high = index * SLOTS // partitions, (index + 1) * SLOTS // partitions
    salt = 0
    while True:
        name = f"{topic}:p{index}.{salt}"
        if low <= slot_of(name) < high:
            return name
        salt += 1


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition of a message published with ``key`` (CRC32 of its UTF-8 bytes)."""
    if isinstance(key, str):
        key = key.encode()
    elif not isinstance(key, bytes):
        raise ConfigError(f"key must be str or bytes, got {type(key).__name__}")
    return zlib.crc32(key) % partitions


def choose_partition(key: str | bytes | None, partitions: int, next_turn: Callable[[], int]) -> int:
    """The partition of a message: by its key's hash, else ``next_turn()`` (a count that
    goes up by one each call) modulo the partitions."""
    if key is not None:
        return partition_for_key(key, partitions)
    if partitions == 1:
        return 0
    return next_turn() % partitions


# -- priority levels ------------------------------------------------------------------
# Each level is its own stream per partition: the default level keeps the partition's own
# name (a producer or reader that knows nothing of levels uses it), any other level ``L``
# is ``<partition stream>:q<L>``, which no partition's name (``...:p<i>.<s>``) can be.
MAX_PRIORITIES = 10


def validate_priorities(priorities: object) -> int:
    if isinstance(priorities, bool) or not isinstance(priorities, int):
        raise ConfigError(f"priorities must be an int, got {priorities!r}")
    if not 1 <= priorities <= MAX_PRIORITIES:
        raise ConfigError(f"priorities must be between 1 and {MAX_PRIORITIES}, got {priorities}")
    return priorities


def default_level(priorities: int) -> int:
    """The level of a message published without ``priority=``: the middle one."""
    return priorities // 2


def check_priority(priority: object, priorities: int) -> int:
    """The level ``priority`` names on a topic of ``priorities`` levels (None: the
    default); ConfigError for anything else, naming the valid choices."""
    if priority is None:
        return default_level(priorities)
    if priorities == 1:
        raise ConfigError(
            f"priority={priority!r}, but this queue has no priorities: pass "
            "MessageQueue(..., priorities=N) (every queue of the topic alike)"
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"priority must be an int, got {priority!r}")
    if not 0 <= priority < priorities:
        raise ConfigError(
            f"priority must be between 0 (highest) and {priorities - 1} (lowest), got {priority}"
        )
    return priority


def level_weights(priorities: int) -> tuple[int, ...]:
    """Each level's weight when levels share a consumer: ``2 ** (N - 1 - level)``."""
    return tuple(1 << (priorities - 1 - level) for level in range(priorities))


@functools.lru_cache(maxsize=64)
def topic_streams(topic: str, partitions: int, priorities: int = 1) -> tuple[str, ...]:
    """Every stream of ``topic``: level ``L`` of partition ``i`` is stream number
    ``L * partitions + i`` (with one level: the partitions' streams)."""
    named = partition_streams(topic, partitions)
    if priorities == 1:
        return named
    validate_priorities(priorities)
    middle = default_level(priorities)
    return tuple(
        stream if level == middle else f"{stream}:q{level}"
        for level in range(priorities)
        for stream in named
    )
