"""Stopped entries in ordered mode: a stopped entry holds its key behind it until resumed.

The fenced read says which of the entries it read are stopped (no extra round trip); an
entry stopped after it was read, while it waits in its lane, is known from the consumer's
copy of the stopped IDs (kept current by the control channel, as in shared mode). When
the entry's lane reaches it, the entry is set aside as in shared mode
(:func:`~streamq.topic.control.hold_message`: out of the pending list, its group
remembered) and its lane stops. While some entries are held, their IDs are polled in the
stopped hash; once one is resumed (``resume_message`` puts it back into the group's
pending list) its lane goes on from it: it is claimed to this consumer and handled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..message import RawEntry
from ..topic.control import StoppedView, hold_message
from ..wire.keys import Keys
from .failures import describe
from .timing import POLL_INTERVAL

if TYPE_CHECKING:
    from .ordering import KeyedLanes, LaneKey

log = logging.getLogger(__name__)


class StoppedHolds:
    """The stopped entries of one owned partition and the lanes waiting behind them."""

    def __init__(self, client: aioredis.Redis, stream: str, group: str, view: StoppedView) -> None:
        self._client, self._stream, self._group = client, stream, group
        self.flagged: set[str] = set()  # read while stopped (as the fenced read said)
        self.view = view  # the partition's stopped IDs, as the control channel tells them
        self._held: dict[str, LaneKey] = {}  # entry ID -> its lane, until resumed
        self.resumed: set[str] = set()  # resumed: claim it back, then handle it

    async def hold(self, entry: RawEntry) -> bool:
        """Set ``entry`` aside if it is still stopped (True: its lane stops here)."""
        self.flagged.discard(entry.id)
        if not await hold_message(self._client, self._stream, self._group, entry.id):
            return False  # resumed meanwhile: handle it now
        log.info("entry %s is stopped; its key waits until it is resumed", entry.id)
        self._held[entry.id] = entry.fields.get(b"key")
        return True

    async def set_aside(self, entry: RawEntry, give_up: Callable[[], None]) -> bool:
        """``entry``'s handler was cancelled by its stop: set it aside, its key waits (True);
        False if it was resumed meanwhile (it runs again). An error gives the partition up
        (``give_up``): the next owner takes it over, as after any error outside a handler."""
        try:
            return await self.hold(entry)
        except Exception as e:
            log.error("partition %s: giving it up after an error at entry %s: %s",
                      self._stream, entry.id, describe(e), exc_info=e)  # fmt: skip
            give_up()
            return True

    async def watch(self, lanes: KeyedLanes, may_act: Callable[[], bool]) -> None:
        """Poll the held entries; resume the lane of each entry resumed."""
        while True:
            await anyio.sleep(POLL_INTERVAL)
            if not self._held or not may_act():
                continue
            try:
                await self._poll(lanes)
            except RedisFailure as e:
                log.warning("could not check the stopped entries: %s", e)

    async def _poll(self, lanes: KeyedLanes) -> None:
        ids = list(self._held)
        stopped = await self._client.hmget(Keys(self._stream).stopped, ids)
        for entry_id, still in zip(ids, stopped, strict=True):
            if still is None:
                self.resumed.add(entry_id)
                lanes.resume(self._held.pop(entry_id))
