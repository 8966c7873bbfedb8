"""Ordered consumption seen from outside a running consumer: whether a group may be opened
in one mode while consumers of the other mode read it, each partition's owner, and the
halted keys an operator lists and releases."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis

from ..errors import ConfigError
from ..wire import ownership as wire
from ..wire.replies import text
from .halted import HaltedKey, list_halted, release_key

Clients = Callable[[str], aioredis.Redis]


async def check_mode(
    client_for: Clients,
    topic: str,
    streams: Sequence[str],
    group: str,
    me: str,
    *,
    ordered: bool,
    active_within: float,
) -> None:
    """ConfigError naming the consumers of the other mode: ordered members that are live
    when ``ordered`` is False; when True, consumers of the group that read any partition
    in the last ``active_within`` seconds and never were ordered members (every ordered
    member, live or not, has a record in the membership: idle times alone cannot tell, a
    server restart makes every consumer's reads look recent)."""
    topic_client = client_for(topic)
    if not ordered:
        await _check_unordered(topic_client, topic, group, me)
        return
    members = {text(m) for m in await topic_client.hkeys(wire.members_key(topic, group))}
    unordered: set[str] = set()
    for stream in streams:
        for info in await _consumers(client_for(stream), stream, group):
            name = text(info["name"])
            if name != me and name not in members and int(info["idle"]) < active_within * 1000:
                unordered.add(name)
    if unordered:
        raise ConfigError(
            f"group {group!r} of {topic!r} is consumed unordered by {_names(sorted(unordered))}: "
            "stop them or open them with ordered=True too (or use another group)"
        )


async def _check_unordered(client: aioredis.Redis, topic: str, group: str, me: str) -> None:
    # EXISTS first: a user limited to shared mode's commands (no TIME, no HGETALL) can
    # open a topic no ordered consumer ever used without being refused anything
    key = wire.members_key(topic, group)
    if not await client.exists(key):
        return
    live = [m for m in await wire.live_members(client, topic, group) if m != me]
    if live:
        raise ConfigError(
            f"group {group!r} of {topic!r} is consumed in ordered mode by {_names(live)}: "
            "open this queue with ordered=True too (or use another group)"
        )
    # ``me`` may have been an ordered member: from now on it reads unordered, and an
    # ordered queue opened later must count it as such
    await client.hdel(key, me)


async def _consumers(client: aioredis.Redis, stream: str, group: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await client.xinfo_consumers(stream, group)
    return found


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def lease_keys(stream: str, groups: Iterable[str]) -> list[str]:
    """The ordered leases of ``stream`` for ``groups`` (on the stream's slot)."""
    return [wire.lease_key(stream, group) for group in groups]


def membership_keys(topic: str, groups: Iterable[str]) -> list[str]:
    """The ordered memberships of ``topic`` for ``groups`` (on the topic's own slot)."""
    return [wire.members_key(topic, group) for group in groups]


async def owners(
    client_for: Clients, streams: Sequence[str], group: str
) -> list[tuple[str, int] | None]:
    """Each partition's owner and fencing token (None: no unexpired lease)."""
    return [await wire.lease_holder(client_for(s), s, group) for s in streams]


async def halted_keys(client_for: Clients, streams: Sequence[str], group: str) -> list[HaltedKey]:
    found: list[HaltedKey] = []
    for partition, stream in enumerate(streams):
        found += await list_halted(client_for(stream), stream, group, partition)
    return found


async def release_halted(
    client_for: Clients, streams: Sequence[str], group: str, key: str | None, *, skip: bool
) -> bool:
    """Ask the owner to release halted ``key``; False if no partition has it halted."""
    action = "skip" if skip else "retry"
    released = False
    for stream in streams:
        released = await release_key(client_for(stream), stream, group, key, action) or released
    return released
