"""The server side of ordered consumption: membership, partition leases with fencing tokens,
and the fenced reads, claims and acks of a partition's owner (see docs/guides/ordering.md).

Keys (each on one slot, so every script is atomic there):

* ``streamq:{<topic>}:members:<group>``: hash, member name -> ``<expiry ms>|<held>`` where
  ``held`` lists the partitions the member holds (``0,3,5``). A member whose record has
  expired (it died, or left: its expiry is then the time it left) is not live, and its
  record stays with the topic: it says the consumer of that name was an ordered member.
* ``streamq:{<partition stream>}:owner:<group>``: hash ``consumer``, ``token`` (the fencing
  token: the topic's epoch, the server's time in microseconds, at the first acquire, then
  incremented by each acquire, never reset, so never reused, also by a topic terminated
  and created again), ``expires`` (ms).

Times are the server's (``TIME``), so members' clocks need not agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import WrongTypeError
from . import records, resp
from .damage import set_aside
from .keys import Keys
from .ownership_scripts import ACQUIRE, FENCED, HEARTBEAT, RELEASE, RENEW
from .records import MAX_LEASE_MS, DamagedRecord
from .replies import text
from .translate import translate
from .wrong_type import named_wrong_type, naming_wrong_type, unless_wrong_type

# a lease or stopped record of another type: what an ordered consumer does
CANNOT_OWN = "the ordered consumer cannot own the partition: it stops (stop_reason 'error')"


def members_key(topic: str, group: str) -> str:
    return f"{Keys(topic).prefix}members:{group}"


def lease_key(stream: str, group: str) -> str:
    return f"{Keys(stream).prefix}owner:{group}"


@dataclass(frozen=True, slots=True)
class Member:
    """A live member as its last heartbeat said: its name and the partitions it holds."""

    name: str
    held: frozenset[int]


def parse_members(key: str, flat: Sequence[Any]) -> list[Member]:
    """The members of a flat ``[name, value, ...]`` reply; damaged values set aside."""
    members = []
    for i in range(0, len(flat), 2):
        record = records.member(key, flat[i], flat[i + 1])
        if isinstance(record, DamagedRecord):
            set_aside(record, "not counted as a member")
        else:
            members.append(Member(text(flat[i]), record.held))
    return members


async def heartbeat(
    client: aioredis.Redis,
    topic: str,
    group: str,
    me: str,
    ttl: float,
    held: Sequence[int],
    *,
    partitioned: bool = False,
) -> list[Member]:
    """Say ``me`` is alive and holds ``held``; return the live members (``me`` included;
    none when the topic is gone). Damaged member fields are deleted by the heartbeat and
    logged here."""
    key = members_key(topic, group)
    topic_key = Keys(topic).partitions if partitioned else topic
    reply = await client.eval(HEARTBEAT, 2, key, topic_key, me, _ms(ttl),
                              ",".join(map(str, held)), "0", MAX_LEASE_MS)  # fmt: skip
    live, damaged = reply if reply else ([], [])
    for i in range(0, len(damaged), 2):
        found = records.member(key, damaged[i], damaged[i + 1])
        if not isinstance(found, DamagedRecord):  # parses, but expires too far ahead
            found = records.member_expiry_bounded(key, damaged[i], found, 0)
        if isinstance(found, DamagedRecord):
            set_aside(found, "deleted from the membership")
    return parse_members(key, live)


async def leave(client: aioredis.Redis, topic: str, group: str, me: str) -> None:
    await client.eval(HEARTBEAT, 1, members_key(topic, group), me, "0", "", "1", MAX_LEASE_MS)


async def live_members(client: aioredis.Redis, topic: str, group: str) -> list[str]:
    """Names of the live members, without joining (a read: expired fields are skipped,
    damaged ones set aside)."""
    now = await _server_ms(client)
    key = members_key(topic, group)
    live = []
    for name, value in (await client.hgetall(key)).items():
        record = records.member(key, name, value)
        if not isinstance(record, DamagedRecord):
            record = records.member_expiry_bounded(key, name, record, now)
        if isinstance(record, DamagedRecord):
            set_aside(record, "not counted as a member")
        elif record.expires > now:
            live.append(text(name))
    return sorted(live)


async def _server_ms(client: aioredis.Redis) -> int:
    now_s, now_us = await client.time()
    return int(now_s) * 1000 + int(now_us) // 1000


async def acquire(
    client: aioredis.Redis, stream: str, group: str, me: str, ttl: float
) -> int | None:
    """Take the lease of ``stream``: its new fencing token, or None if someone holds it."""
    key = lease_key(stream, group)
    taking = client.eval(ACQUIRE, 2, key, stream, me, _ms(ttl), MAX_LEASE_MS)
    ok, value, *damaged = await naming_wrong_type(taking, client, [("lease", key, "hash")],
                                                  CANNOT_OWN)  # fmt: skip
    for field, found in zip(damaged[::2], damaged[1::2], strict=True):
        if text(field) == "token":
            token = records.lease_token(key, found)
            if isinstance(token, DamagedRecord):
                set_aside(token, f"replaced by the server's time in µs (token {int(value)})")
        else:
            expiry = records.lease_expiry(key, found, 0)
            if isinstance(expiry, DamagedRecord):
                set_aside(expiry, "the lease is taken for expired")
    return int(value) if ok == 1 else None


async def renew(
    client: aioredis.Redis, stream: str, group: str, me: str, token: int, ttl: float
) -> bool:
    return bool(await client.eval(RENEW, 1, lease_key(stream, group), me, str(token), _ms(ttl)))


async def release(client: aioredis.Redis, stream: str, group: str, me: str, token: int) -> bool:
    return bool(await client.eval(RELEASE, 1, lease_key(stream, group), me, str(token)))


async def lease_holder(client: aioredis.Redis, stream: str, group: str) -> tuple[str, int] | None:
    """The lease's holder and token if it is unexpired (for ``topic_info`` and tests); a
    damaged lease is set aside (no holder)."""
    now = await _server_ms(client)
    key = lease_key(stream, group)
    read = client.hmget(key, "consumer", "token", "expires")
    none: list[bytes | None] = [None, None, None]
    consumer, token, expires = await unless_wrong_type(
        read, client, "lease", key, "hash", none, "the lease is taken for not held"
    )
    if consumer is None:
        return None
    until = records.lease_expiry(key, expires, now)
    number = records.lease_token(key, token)
    for found in (until, number):
        if isinstance(found, DamagedRecord):
            set_aside(found, "the lease is taken for not held")
            return None
    if isinstance(until, DamagedRecord) or until <= now or not isinstance(number, int):
        return None
    return text(consumer), number


FENCED_SHA = hashlib.sha1(FENCED.encode()).hexdigest()


async def fenced(
    client: aioredis.Redis,
    stream: str,
    group: str,
    me: str,
    token: int,
    *args: str | int | bytes,
    connection: resp.OwnConnection | None = None,
) -> list[Any] | None:
    """Run one fenced op (see :data:`FENCED`); None when the lease is no longer held.

    Hand-packed ``EVALSHA`` (``EVAL`` when the server lacks the script), on ``connection``
    if given (a partition's read loop keeps its own), else on a pooled one: every read,
    claim and ack runs this, and redis-py's generic command path cost as much per call as
    the script itself."""
    call = ["3", lease_key(stream, group), stream, Keys(stream).stopped, me, str(token), group,
            *(a if isinstance(a, bytes) else str(a) for a in args)]  # fmt: skip
    reply = await _send(client, connection, resp.pack("EVALSHA", FENCED_SHA, *call))
    if isinstance(reply, rx.NoScriptError):
        reply = await _send(client, connection, resp.pack("EVAL", FENCED, *call))
    if isinstance(reply, rx.ResponseError):
        error = translate(reply, stream, group)
        if isinstance(error, WrongTypeError):  # which of streamq's keys, named
            own = [("lease", lease_key(stream, group), "hash"),
                   ("stopped", Keys(stream).stopped, "hash")]  # fmt: skip
            error = await named_wrong_type(error, client, own, CANNOT_OWN)
        raise error from reply
    return None if reply[0] == 0 else list(reply)


async def _send(
    client: aioredis.Redis, connection: resp.OwnConnection | None, packed: bytes
) -> Any:
    """The reply to ``packed``, an error reply in its place; after ``MOVED`` (the script did
    not run, the slot table is corrected) sent once more."""
    for _ in range(2):
        if connection is None:
            (reply,) = await resp.execute(client, packed, 1, raise_errors=False)
        else:
            (reply,) = await connection.execute(packed, 1, raise_errors=False)
        if not isinstance(reply, rx.MovedError):
            break
    return reply


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))
