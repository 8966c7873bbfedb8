"""Halted keys (``on_poison="halt"``): a key whose entry failed ``max_deliveries`` times
stops, with its later entries behind it, until an operator releases it.

Each halted key is recorded in ``streamq:{<partition stream>}:halted`` (one hash for every
group, so that terminating the topic deletes it): field = JSON ``[group, key]`` (key
``null`` for the keyless entries of the partition), value = JSON ``{"id", "reason",
"action"}``. An operator releases it by setting ``action`` (:func:`release_key`):
``"skip"`` dead-letters the poison entry and the key goes on, ``"retry"`` runs it again with
a fresh delivery count. The partition's owner polls its halted keys and acts; the record
outlives an owner (the next one halts on the same entry, which is past ``max_deliveries``,
and keeps a release already asked for).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..message import RawEntry
from ..wire.keys import Keys
from ..wire.replies import text

if TYPE_CHECKING:
    from .ordering import KeyedLanes, LaneKey

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5
ACTIONS = ("skip", "retry")


def halted_key(stream: str) -> str:
    return Keys(stream).halted


def _field(group: str, key: str | None) -> str:
    return json.dumps([group, key])


def _lane_field(group: str, key: bytes | None) -> str:
    return _field(group, None if key is None else key.decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class HaltedKey:
    """A halted key: the publish key (None: the keyless entries of the partition), the
    partition, the ID of the entry it halted on, why, and a release asked for (or None)."""

    key: str | None
    partition: int
    entry_id: str
    reason: str
    action: str | None


class HaltedKeys:
    """The halted keys of one owned partition."""

    def __init__(self, client: aioredis.Redis, stream: str, group: str) -> None:
        self._client, self._hash, self._group = client, halted_key(stream), group
        self._waiting: dict[str, tuple[str, LaneKey]] = {}  # field -> (entry ID, lane key)
        self.released: dict[str, str] = {}  # entry ID -> action, for its lane to apply

    async def halt(self, entry: RawEntry, reason: str) -> None:
        """Record that ``entry``'s key halts (keeping a release already asked for it)."""
        lane_key = entry.fields.get(b"key")
        field = _lane_field(self._group, lane_key)
        known = await self._client.hget(self._hash, field)
        if known is None or json.loads(known).get("id") != entry.id:
            record = {"id": entry.id, "reason": reason, "action": None}
            await self._client.hset(self._hash, field, json.dumps(record))
            log.error("key %s halted on entry %s: %s", field, entry.id, reason)
        self._waiting[field] = (entry.id, lane_key)

    async def watch(self, lanes: KeyedLanes, may_act: Callable[[], bool]) -> None:
        """Poll the halted keys of this partition; resume the lanes an operator released."""
        while True:
            await anyio.sleep(POLL_INTERVAL)
            if not self._waiting or not may_act():
                continue
            try:
                await self._poll(lanes)
            except RedisFailure as e:
                log.warning("could not check the halted keys: %s", e)

    async def _poll(self, lanes: KeyedLanes) -> None:
        fields = list(self._waiting)
        values = await self._client.hmget(self._hash, fields)
        for field, value in zip(fields, values, strict=True):
            record = json.loads(value) if value is not None else {"action": "retry"}
            action = record.get("action")
            if action not in ACTIONS:
                continue
            entry_id, lane_key = self._waiting.pop(field)
            self.released[entry_id] = action
            await self._client.hdel(self._hash, field)
            log.info("key %s released (%s) at entry %s", field, action, entry_id)
            lanes.resume(lane_key)

    @property
    def count(self) -> int:
        return len(self._waiting)


async def list_halted(
    client: aioredis.Redis, stream: str, group: str, partition: int
) -> list[HaltedKey]:
    found = await client.hgetall(halted_key(stream))
    halted = []
    for field, value in found.items():
        of_group, key = json.loads(text(field))
        if of_group == group:
            record = json.loads(value)
            halted.append(HaltedKey(key, partition, record["id"], record["reason"],
                                    record.get("action")))  # fmt: skip
    return halted


async def release_key(
    client: aioredis.Redis, stream: str, group: str, key: str | None, action: str
) -> bool:
    """Ask the owner to release halted ``key`` with ``action``; False if it is not halted."""
    field = _field(group, key)
    value = await client.hget(halted_key(stream), field)
    if value is None:
        return False
    record = json.loads(value)
    record["action"] = action
    await client.hset(halted_key(stream), field, json.dumps(record))
    return True
