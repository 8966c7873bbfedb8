"""Throttle records: a type, or one key of a type, held back in a group for some seconds
across every consumer (what a handler's :class:`~streamq.Throttle` asks for).

A throttle is one expiring key on the slot of the topic's own name,
``streamq:{<topic>}:throttle:<group length>:<group>:<type length>:<type>`` for the type and
``...:key:<key>`` for a key (``...:none`` for the entries without one; see
:meth:`~streamq.wire.keys.Keys.throttle`), written with an expiry of the throttle's length:
it is gone when the throttle ends. Throttling what is throttled already keeps the longer
of the two. Reading costs one round trip for any number of keys of a type; an entry is
held back while its type or its key is throttled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import redis.asyncio as aioredis

from ..wire.damage import set_aside
from ..wire.flow_scripts import THROTTLE
from ..wire.keys import Keys
from ..wire.records import DamagedRecord, throttle_expiry

Scope = Literal["key", "type"]


def throttle_key(
    stream: str, group: str, type_name: str, key: str | None, scope: Scope = "key"
) -> str:
    """The record of ``type_name`` (``scope="type"``) or of its ``key`` (``"key"``)."""
    return Keys(stream).throttle(group, type_name, per_key=scope == "key", key=key)


async def throttle(
    client: aioredis.Redis,
    stream: str,
    group: str,
    type_name: str,
    key: str | None,
    seconds: float,
    *,
    scope: Scope = "key",
) -> float:
    """Hold back ``key`` of ``type_name`` (``scope="key"``; ``None``: the entries without
    a key) or the whole type (``scope="type"``, ``key`` ignored) in ``group`` of the topic
    ``stream`` for ``seconds`` (as a :class:`~streamq.Throttle` checked them), unless it
    is held back longer already. Returns the seconds it is now held back. ``client``
    serves the topic's own keys. One round trip."""
    ms = max(round(seconds * 1000), 1)
    name = throttle_key(stream, group, type_name, key, scope)
    keys = [name] if scope == "type" else [name, Keys(stream).throttled_keys_of(group, type_name)]
    lasts = await client.register_script(THROTTLE)(keys=keys, args=[ms, ms])
    return int(lasts) / 1000


async def throttled_types(
    client: aioredis.Redis, stream: str, group: str, types: Iterable[str]
) -> set[str]:
    """Of ``types``, those with a throttle in force in ``group`` (of the type, or of some
    of its keys), in one round trip: a consumer then looks up its entries' keys."""
    wanted = sorted(set(types))
    if not wanted:
        return set()
    keys = Keys(stream)
    names = []
    for type_name in wanted:
        names += [throttle_key(stream, group, type_name, None, "type"),
                  keys.throttled_keys_of(group, type_name)]  # fmt: skip
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
    remaining = _checked(names, await pipe.execute())
    return {t for i, t in enumerate(wanted) if remaining[2 * i] > 0 or remaining[2 * i + 1] > 0}


async def throttled_for(
    client: aioredis.Redis, stream: str, group: str, type_name: str, key: str | None
) -> float:
    """The seconds an entry of ``type_name`` with ``key`` is still held back in
    ``group`` (0.0: not throttled): the longer of its type's and its key's throttles."""
    return (await throttled_keys(client, stream, group, type_name, [key]))[key]


async def throttled_keys(
    client: aioredis.Redis,
    stream: str,
    group: str,
    type_name: str,
    keys: Iterable[str | None],
) -> dict[str | None, float]:
    """:func:`throttled_for` of every key in ``keys``, in one round trip: key -> seconds
    (0.0 for the keys not held back). A record streamq did not write (no expiry, or one
    longer than a throttle can be) is logged once, counted and not obeyed."""
    wanted = list(dict.fromkeys(keys))
    names = [throttle_key(stream, group, type_name, None, "type")]
    names += [throttle_key(stream, group, type_name, key) for key in wanted]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
    remaining = _checked(names, await pipe.execute())
    whole_type = remaining[0]
    return {key: max(whole_type, ms) / 1000 for key, ms in zip(wanted, remaining[1:], strict=True)}


def _checked(names: Sequence[str], replies: Sequence[int]) -> list[int]:
    remaining = []
    for name, pttl in zip(names, replies, strict=True):
        found = throttle_expiry(name, int(pttl))
        if isinstance(found, DamagedRecord):
            set_aside(found, "not obeyed: the entries it names are not held back")
            found = 0
        remaining.append(found)
    return remaining
