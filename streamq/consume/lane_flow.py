"""Flow control in ordered mode: before an entry runs in its key's lane, whether it must
wait (its type paused, its key throttled, its type's rate limit used up). A waiting entry
stops its lane, holding no handler slot; the lane goes on from it after the wait, so its
key keeps its order (shared mode's entries wait in :mod:`.flow_stage` instead)."""

from __future__ import annotations

import functools
import logging

from ..errors import RedisFailure
from ..message import RawEntry
from .dispatch import Dispatcher
from .ordered_dispatch import Shared
from .ordering import Later
from .rate_keys import rate_key_of
from .timing import READ_ERROR_BACKOFF

log = logging.getLogger(__name__)

PAUSE_LOOKED_AT_EVERY = 5.0  # seconds: a paused key wakes when the pause ends, else after this


async def lane_wait(
    shared: Shared, dispatcher: Dispatcher, entry: RawEntry, stream: str
) -> Later | None:
    """How long ``entry`` must wait, and for what (None: it may run now, and took its
    rate-limit permit). Without the server the key waits a moment and asks again, counted
    as waiting for its rate limit: never the entry's failure."""
    gate, type_name = shared.gate, entry.type
    if type_name is None:
        return None
    if gate.paused(type_name):  # until the pause ends (looked at again now and then)
        return Later(
            PAUSE_LOOKED_AT_EVERY, "pause", functools.partial(gate.wait_unpaused, type_name)
        )
    if not gate.limited(type_name) and type_name not in shared.throttled_types:
        return None
    try:
        if type_name in shared.throttled_types:  # a throttle of it was seen: read its records
            raw_key = entry.fields.get(b"key")
            key = None if raw_key is None else raw_key.decode("utf-8", "replace")
            held = (await gate.throttled(type_name, [key]))[key]
            if held > 0:
                return Later(held, "throttle")
        wait = await _permit(shared, dispatcher, type_name, entry)
    except RedisFailure as e:
        log.warning("partition %s: flow control not checked, %s waits: %s", stream, entry.id, e)
        return Later(READ_ERROR_BACKOFF, "rate_limit")
    return None if wait == 0 else Later(wait, "rate_limit")


async def _permit(shared: Shared, dispatcher: Dispatcher, type_name: str, entry: RawEntry) -> float:
    """Take the entry's rate-limit permit: 0 when granted, else the seconds to the next."""
    gate = shared.gate
    if not gate.limited(type_name):
        return 0.0
    route = shared.router.by_type_field.get(entry.fields.get(b"type", b""))
    raw_key = entry.fields.get(b"key")
    publish_key = None if raw_key is None else raw_key.decode("utf-8", "replace")
    rate_key = (
        None
        if route is None
        else rate_key_of(gate, route, entry, publish_key, dispatcher.message, dispatcher.summary)
    )
    grant = await gate.take(type_name, rate_key)
    return 0.0 if grant.granted else max(grant.wait_seconds, 0.001)
