"""Where a queue starts reading when it opens: its group created at its start position,
or, for a fan-out queue (no group), its cursor on each stream set in memory. Apart from
:mod:`.fanout`, so that a queue with a group does not load the fan-out subscriber."""

from __future__ import annotations

from collections.abc import MutableMapping

import redis.asyncio as aioredis

from ..config import StartFrom
from ..topic import admin


class Cursors(dict[str, str]):
    """A fan-out subscriber's read cursor on each of its streams (the ID it read up to),
    and ``opened_ms``, the server's clock when the queue last opened: a terminate before
    it is not about this subscriber (it reads the topic made again)."""

    opened_ms: int | None = None


async def start_position(client: aioredis.Redis, stream: str, start: StartFrom) -> str:
    """The ID to read after: ``start``'s, with ``LATEST`` resolved to the stream's last
    entry now (``0-0`` if it has none yet), so what is published once the queue is open is
    received even if the first read comes later."""
    if start.position != StartFrom.LATEST.position:
        return start.position
    last = await client.xrevrange(stream, count=1)
    if not last:
        return "0-0"
    entry_id = last[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def prepare_reading(
    client: aioredis.Redis,
    stream: str,
    group: str | None,
    start: StartFrom,
    positions: MutableMapping[str, str],
) -> None:
    """When a queue opens: create its group if needed (the start position applies at
    creation), or, for a fan-out queue (``group`` None), set its cursor on ``stream``."""
    if group is None:
        positions[stream] = await start_position(client, stream, start)
    else:
        await admin.ensure_group(client, stream, group, start.position)
