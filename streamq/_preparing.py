"""What opening a queue checks and prepares on the server, before anything is read: the
permissions its work needs, the topic's recorded shape, each stream's group (or a fan-out
subscriber's start position), the consumer name's claim, and that no consumer of the group
runs in the other mode (shared against ordered)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from .config import StartFrom
from .consume.name_claim import NameClaim
from .consume.positions import Cursors, prepare_reading
from .topic.control import server_ms
from .topic.handle import TopicHandle
from .topic.ownership import check_mode
from .wire.permission_check import check_permissions


@dataclass(frozen=True, slots=True)
class Preparation:
    """A queue's settings that opening acts on."""

    group: str | None
    consumer: str
    start: StartFrom
    consuming: bool  # handlers are registered
    cleanup: bool
    ordered: bool
    active_within: float  # ordered mode's ownership lease: how long a member counts live


async def prepare(
    topic: TopicHandle,
    client_for: Callable[[str], aioredis.Redis],
    name: NameClaim,
    settings: Preparation,
    positions: Cursors,
) -> None:
    """Check and prepare the server for a queue about to publish or consume."""
    s = settings
    if s.group is None and s.consuming:  # before its cursors: a terminate after counts
        positions.opened_ms = await server_ms(topic.client)
    if len(topic.streams) > 1:  # the topic's own record of its partitions (and levels)
        await check_permissions(topic.client, topic.stream, consuming=False, partitioned=True)
    await topic.check_shape()
    grouped = s.group is not None  # fan-out: only XREAD, which opening checks
    for stream in topic.streams:
        client = client_for(stream)
        await check_permissions(client, stream, consuming=grouped and s.consuming,
                                cleanup=s.cleanup, ordered=s.ordered)  # fmt: skip
        await prepare_reading(client, stream, s.group, s.start, positions)
    if s.group is None:
        return
    if s.consuming:  # one live process per consumer name in a group
        await name.take(topic.client, s.consumer)
    await check_mode(
        client_for, topic.stream, topic.streams, s.group, s.consumer,
        ordered=s.ordered, active_within=s.active_within,
    )  # fmt: skip
