"""Forgetting a consumer name that is gone for good (``streamq forget``).

No mode deletes a consumer from its group when it stops: its pending entries are listed
under its name, and a process restarted under that name recovers them. Ordered mode also
keeps the membership record of every consumer that was an ordered member, as long as the
topic lives (``streamq.wire.ownership``). A name that will not come back (a retired host,
a renamed service) is forgotten here: its consumer entry in the group of every partition
and its membership record are deleted.

Nothing is deleted while its membership record is live (not expired), nor while it owns
pending entries on any partition (``XGROUP DELCONSUMER`` would drop them from the pending
list: they would never be delivered again). Each partition's check and deletion are one
script, so an entry read under the name meanwhile keeps the consumer. The caller holds the
name's claim meanwhile (``streamq.consume.name_claim``), so that no queue opens under it.
Its flow-control report (``streamq.flow.waiting``), if any, goes too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..wire import ownership
from ..wire.keys import Keys
from ..wire.replies import Consumer, consumers

log = logging.getLogger(__name__)

# KEYS: the partition stream. ARGV: group, consumer. Deletes the consumer from the group
# unless it owns pending entries: then returns -1 and deletes nothing.
DELETE_IDLE = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return -1 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
"""

Part = tuple[str, aioredis.Redis]  # a partition stream and the client of its slot


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What was deleted: the consumer entries (one per partition whose group listed the
    name) and whether an ordered membership record was."""

    partitions: int
    member: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """Why nothing was deleted, as one line for people."""

    reason: str


async def forget_consumer(
    topic_client: aioredis.Redis, topic: str, parts: Sequence[Part], group: str, consumer: str
) -> Forgotten | Refused:
    """Delete ``consumer`` from ``group`` on every partition in ``parts`` and from the
    ordered membership of ``topic`` (on ``topic_client``, the topic's slot); or say why
    not: a live ordered member, pending entries, no such consumer."""
    named = f"consumer {consumer!r} of group {group!r} on {topic!r}"
    if consumer in await ownership.live_members(topic_client, topic, group):
        return Refused(f"{named} is a live ordered member (its membership record has not "
                       "expired): stop it first")  # fmt: skip
    listed = []
    for stream, client in parts:
        row = _row(consumers(await client.xinfo_consumers(stream, group)), consumer)
        if row is not None and row.pending:
            return _pending(named, row.pending, stream, group)
        if row is not None:
            listed.append((stream, client))
    for stream, client in listed:
        if await client.eval(DELETE_IDLE, 1, stream, group, consumer) == -1:
            return _pending(named, 1, stream, group)  # read under the name meanwhile
    member = bool(await topic_client.hdel(ownership.members_key(topic, group), consumer))
    await _drop_waiting_report(topic_client, topic, group, consumer)
    if not listed and not member:
        return Refused(f"no consumer {consumer!r} in group {group!r} of {topic!r}")
    return Forgotten(len(listed), member)


async def _drop_waiting_report(
    client: aioredis.Redis, topic: str, group: str, consumer: str
) -> None:
    """The consumer's flow-control report goes with it (:mod:`streamq.flow.waiting`); one
    that cannot be removed (a damaged record) stops counting once it is stale."""
    try:
        await client.hdel(Keys(topic).waiting(group), consumer)
    except RedisFailure as e:
        log.warning("the waiting report of %r stays until it is stale: %s", consumer, e)


def _row(rows: Sequence[Consumer], consumer: str) -> Consumer | None:
    return next((row for row in rows if row.name == consumer), None)


def _pending(named: str, count: int, stream: str, group: str) -> Refused:
    return Refused(
        f"{named} owns {count} pending {'entry' if count == 1 else 'entries'} on {stream!r}: "
        "forgotten, they would never be delivered "
        f"again; let another consumer claim them or acknowledge them first (see streamq "
        f"pending {stream} {group})"
    )
