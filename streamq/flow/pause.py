"""Pausing a group, or one type in it: the record on the server, and the notice.

A group's pauses are one hash, ``streamq:{<topic>}:paused:<group>``: field ``*`` pauses the
whole group, a message type's name pauses that type; each value is when it was paused
(Unix ms). It persists until resumed, so a consumer that starts (or restarts) finds it.
Pausing the group and pausing a type are separate: resuming the group leaves a type
paused on its own paused, and resuming a type while the group is paused changes nothing
until the group resumes.

**Where it lives on a partitioned topic:** once, on the slot of the topic's own name (as
its partitions record), not on each partition's: a pause is the group's decision about
the topic, written in one step and read in one round trip whatever the partition count,
so no consumer ever sees some partitions paused and others not.

After each change a notice goes out on the sharded channel ``streamq:{<topic>}:flow``
(:class:`~streamq.flow.watch.PauseWatch` re-reads the record when told, and every
:data:`~streamq.flow.watch.POLL_INTERVAL` in any case: a notice is only a hint). It has a
channel of its own rather than the control channel of stop/resume notices: those concern
each partition's entries, a pause the topic's group.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis

from ..errors import ConfigError, MessageFormatError
from ..message import validate_type_name
from ..wire import records
from ..wire.damage import set_aside
from ..wire.flow_scripts import READ_FLOW
from ..wire.keys import Keys
from ..wire.records import DamagedRecord, PausedRecord
from .waiting import Report

WHOLE_GROUP = "*"  # the field that pauses every type of the group
# The largest notice streamq sends is well under this; anything larger is not ours.
MAX_NOTICE_BYTES = 512


def target(type_name: str | None) -> str:
    """The field that pauses ``type_name`` (None: the whole group); ConfigError for a
    name that is no message type."""
    if type_name is None:
        return WHOLE_GROUP
    try:
        return validate_type_name(type_name)
    except MessageFormatError as e:
        raise ConfigError(f"pause/resume type: {e}") from None


async def pause(
    client: aioredis.Redis, stream: str, group: str, type_name: str | None = None
) -> bool:
    """Pause ``type_name`` (None: every type) in ``group`` of the topic ``stream``;
    ``client`` serves the topic's own keys. False if it was paused already (its time
    is kept)."""
    field = target(type_name)
    keys = Keys(stream)
    added = await client.hsetnx(keys.paused(group), field, str(int(time.time() * 1000)))
    await announce(client, stream, group)
    return bool(added)


async def resume(
    client: aioredis.Redis, stream: str, group: str, type_name: str | None = None
) -> bool:
    """Resume ``type_name`` (None: the whole group's pause; types paused on their own
    stay paused); False if it was not paused."""
    field = target(type_name)
    removed = await client.hdel(Keys(stream).paused(group), field)
    await announce(client, stream, group)
    return bool(removed)


async def announce(client: aioredis.Redis, stream: str, group: str) -> None:
    """Tell the group's running consumers to read its pause record again."""
    await client.spublish(Keys(stream).flow_notices, notice(group))


def notice(group: str) -> str:
    return json.dumps({"op": "paused", "group": group})


def notice_group(data: bytes | str) -> str | None:
    """The group a notice names, or None if it is not one streamq could have sent."""
    if len(data) > MAX_NOTICE_BYTES:
        return None
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or found.get("op") != "paused":
        return None
    group = found.get("group")
    return group if isinstance(group, str) else None


async def paused(
    client: aioredis.Redis, stream: str, group: str, *, report: Report | None = None
) -> list[PausedRecord]:
    """What is paused in ``group`` of the topic ``stream``, ``*`` first, then by name. A
    damaged field (or a key that is no hash) is logged once, counted, and not obeyed.
    ``report``: a consumer's waiting report (:mod:`.waiting`), written in the same round
    trip."""
    return (await _read(client, stream, [group], report))[0]


async def paused_groups(
    client: aioredis.Redis, stream: str, groups: Iterable[str]
) -> dict[str, list[str]]:
    """:func:`paused` of each of ``groups`` in one round trip: group -> what is paused
    (``*`` or type names), for the groups with something paused."""
    names = sorted(set(groups))
    found = await _read(client, stream, names) if names else []
    return {
        group: [r.target for r in rows] for group, rows in zip(names, found, strict=True) if rows
    }


async def _read(
    client: aioredis.Redis, stream: str, groups: Sequence[str], report: Report | None = None
) -> list[list[PausedRecord]]:
    keys = [Keys(stream).paused(group) for group in groups]
    script = client.register_script(READ_FLOW)
    if report is None:
        clock, *replies = await script(keys=keys)
    else:
        clock, *replies, replaced = await script(keys=[*keys, report.key], args=report.args())
        report.replaced(replaced)
    now_ms = int(clock[0]) * 1000 + int(clock[1]) // 1000
    return [_checked(key, reply, now_ms) for key, reply in zip(keys, replies, strict=True)]


def _checked(key: str, reply: Sequence[Any], now_ms: int) -> list[PausedRecord]:
    kind, flat = reply
    wrong = records.paused_kind(key, kind)
    if wrong is not None:
        set_aside(wrong, "not obeyed: nothing in the group is paused by it")
        return []
    found = []
    for field, value in zip(flat[::2], flat[1::2], strict=True):
        record = records.paused(key, field, value, now_ms)
        if isinstance(record, DamagedRecord):
            set_aside(record, "not obeyed: what it names is not paused by it")
        else:
            found.append(record)
    return sorted(found, key=lambda r: (r.target != WHOLE_GROUP, r.target))
