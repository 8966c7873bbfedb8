"""The halted keys of an owned partition (``on_poison="halt"``): the owner records the key
that halts on a poison entry and polls for an operator's release
(:mod:`streamq.topic.halted` holds the record, its listing and the release)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..message import RawEntry
from ..topic.halted import ACTIONS, halted_key, lane_field
from ..wire import records
from ..wire.damage import set_aside
from ..wire.records import DamagedRecord, HaltedRecord
from ..wire.wrong_type import unless_wrong_type
from .timing import POLL_INTERVAL

if TYPE_CHECKING:
    from .ordering import KeyedLanes, LaneKey

log = logging.getLogger(__name__)


class HaltedKeys:
    """The halted keys of one owned partition."""

    def __init__(self, client: aioredis.Redis, stream: str, group: str) -> None:
        self._client, self._hash, self._group = client, halted_key(stream), group
        self._waiting: dict[str, tuple[str, LaneKey]] = {}  # field -> (entry ID, lane key)
        self.released: dict[str, str] = {}  # entry ID -> action, for its lane to apply
        self.reasons: dict[str, str] = {}  # entry ID -> why its key halted, until released
        self._recorded: dict[str, str] = {}  # taken over: entry ID -> its halted record's field

    async def halt(self, entry: RawEntry, reason: str) -> None:
        """Record that ``entry``'s key halts (keeping a release already asked for it)."""
        lane_key = entry.fields.get(b"key")
        field = lane_field(self._group, lane_key)
        known = self._parsed(field, await self._client.hget(self._hash, field))
        if known is None or known.entry_id != entry.id:
            record = {"id": entry.id, "reason": reason, "action": None}
            await self._client.hset(self._hash, field, json.dumps(record))
            log.error("key %s halted on entry %s: %s", field, entry.id, reason)
        else:  # halted before (an earlier owner): why it halted then
            reason = known.reason
        self._waiting[field] = (entry.id, lane_key)
        self.reasons[entry.id] = reason

    async def take_over(self) -> None:
        """Taking the partition over: the records of the keys of this group that an earlier
        owner halted, so that the record of one settled here (an owner that dead-letters
        at the limit, after ``on_poison`` changed) is deleted with it."""
        found = await unless_wrong_type(
            self._client.hgetall(self._hash), self._client, "halted", self._hash, "hash", {},
            "not read: the keys it names run as any other",
        )  # fmt: skip
        for field, value in found.items():
            record = records.halted(self._hash, field, value)
            if not isinstance(record, DamagedRecord) and record.group == self._group:
                self._recorded[record.entry_id] = lane_field(
                    self._group, None if record.key is None else record.key.encode()
                )

    async def settled(self, entry_id: str) -> None:
        """``entry_id`` was settled (handled or dead-lettered): a halted record naming it,
        left by an earlier owner, is deleted."""
        field = self._recorded.pop(entry_id, None) if self._recorded else None
        if field is None:
            return
        known = self._parsed(field, await self._client.hget(self._hash, field))
        if known is not None and known.entry_id == entry_id:
            await self._client.hdel(self._hash, field)
            log.info("key %s goes on: its halted entry %s was settled", field, entry_id)

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
            record = self._parsed(field, value)
            if value is not None and record is None:  # damaged: written anew, to release
                entry_id = self._waiting[field][0]
                rewritten = {"id": entry_id, "reason": "its record was damaged", "action": None}
                await self._client.hset(self._hash, field, json.dumps(rewritten))
                continue
            action = "retry" if record is None else record.action
            if action not in ACTIONS:
                continue
            entry_id, lane_key = self._waiting.pop(field)
            self.released[entry_id] = action
            await self._client.hdel(self._hash, field)
            log.info("key %s released (%s) at entry %s", field, action, entry_id)
            lanes.resume(lane_key)

    def _parsed(self, field: str, value: bytes | None) -> HaltedRecord | None:
        """The record of ``field`` (None: none, or damaged: set aside, and
        rewritten by :meth:`halt` or :meth:`_poll`, so that it can be released)."""
        if value is None:
            return None
        record = records.halted(self._hash, field, value)
        if isinstance(record, DamagedRecord):
            set_aside(record, "taken for no record: the key stays halted until released")
            return None
        return record

    @property
    def count(self) -> int:
        return len(self._waiting)

    def entry_ids(self) -> set[str]:
        """The entries the halted keys stopped at."""
        return {entry_id for entry_id, _ in self._waiting.values()}
