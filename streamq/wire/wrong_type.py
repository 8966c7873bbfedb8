"""Reads of streamq's own keys that another writer gave another type.

Every command streamq sends to such a key fails with ``WRONGTYPE``
(:class:`~streamq.errors.WrongTypeError`). A listing sets the key aside instead of failing
with it (:func:`unless_wrong_type`): the record is logged once with its key and the type
found (:mod:`.damage`), the listing goes on with ``default`` in its place, and a reader
within :func:`~.damage.noting` sees it named.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, cast

import redis
import redis.asyncio as aioredis

from ..errors import WrongTypeError
from .damage import set_aside
from .records import DamagedRecord, as_text, wrong_type

T = TypeVar("T")


async def unless_wrong_type(
    read: Awaitable[T],
    client: aioredis.Redis,
    record: str,
    key: str,
    expected: str,
    default: T,
    consequence: str = "not shown",
) -> T:
    """What ``read`` (a command on ``key``) returns; ``default`` if ``key`` holds another
    type than ``expected`` (``"stream"``, ``"hash"``, ``"zset"``), set aside as a damaged
    ``record``."""
    try:
        return await read
    except WrongTypeError:
        set_aside(await wrong_type_of(client, record, key, expected), consequence)
        return default


async def wrong_type_of(
    client: aioredis.Redis, record: str, key: str, expected: str
) -> DamagedRecord:
    """The damaged ``record`` that ``key`` is, holding another type than ``expected``."""
    return wrong_type(record, key, expected, await client.type(key))


def unless_wrong_type_sync(
    read: Callable[[], T],
    client: redis.Redis,
    record: str,
    key: str,
    expected: str,
    default: T,
    consequence: str = "not shown",
) -> T:
    """The blocking twin of :func:`unless_wrong_type` (``read`` called here)."""
    try:
        return read()
    except WrongTypeError:
        set_aside(wrong_type(record, key, expected, cast("bytes", client.type(key))), consequence)
        return default


async def refused_if_wrong_type(
    write: Awaitable[T],
    client: aioredis.Redis,
    record: str,
    key: str,
    expected: str,
    consequence: str,
) -> T:
    """What ``write`` (a command on ``key``) returns; if ``key`` holds another type than
    ``expected``, the damaged ``record`` is set aside (logged once, with ``consequence``)
    and WrongTypeError raised naming it."""
    return await naming_wrong_type(write, client, [(record, key, expected)], consequence)


async def naming_wrong_type(
    command: Awaitable[T],
    client: aioredis.Redis,
    keys: Sequence[tuple[str, str, str]],
    consequence: str,
) -> T:
    """What ``command`` returns; when the server answers WRONGTYPE, the error
    :func:`named_wrong_type` gives is raised."""
    try:
        return await command
    except WrongTypeError as e:
        raise await named_wrong_type(e, client, keys, consequence) from e


async def named_wrong_type(
    error: WrongTypeError,
    client: aioredis.Redis,
    keys: Sequence[tuple[str, str, str]],
    consequence: str,
) -> WrongTypeError:
    """The WrongTypeError naming the first of ``keys`` (record, key, expected type) that
    holds another type, set aside (logged once, with ``consequence``); ``error`` itself if
    none does (another key of the command: the stream itself, say)."""
    for record, key, expected in keys:
        found = as_text(await client.type(key))
        if found not in (expected, "none"):
            damaged = wrong_type(record, key, expected, found)
            set_aside(damaged, consequence)
            return WrongTypeError(f"{damaged}: {consequence}")
    return error
