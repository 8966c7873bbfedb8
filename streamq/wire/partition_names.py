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
