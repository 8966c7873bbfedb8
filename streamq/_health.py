"""``MessageQueue.health()``: what a readiness probe needs, read from the queue and Redis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from .errors import RedisFailure
from .topic import admin


async def health_report(
    parts: Sequence[tuple[aioredis.Redis, str]],
    group: str | None,
    *,
    state: str,
    consuming: bool,
    stop_reason: str | None,
) -> dict[str, Any]:
    """``parts``: each stream of the topic (one per partition) with its client. Pending
    and lag are the group's over all of them (None when unknown, and for a fan-out queue,
    ``group`` None, which has neither)."""
    report: dict[str, Any] = {
        "connected": False, "consuming": consuming, "state": state,
        "stop_reason": stop_reason, "pending": None, "lag": None,
    }  # fmt: skip
    if state == "closed":
        return {**report, "ready": False, "error": "the queue is closed"}
    try:
        client, _ = parts[0]
        report["connected"] = bool(await client.ping())
        if group is not None:
            report["pending"], report["lag"] = await _group_totals(parts, group)
    except RedisFailure as e:
        report["error"] = str(e)
    report["ready"] = report["connected"] and report["consuming"]
    return report


async def _group_totals(
    parts: Sequence[tuple[aioredis.Redis, str]], group: str
) -> tuple[int | None, int | None]:
    pending: int | None = 0
    lag: int | None = 0
    for client, stream in parts:
        part_pending, part_lag = await admin.group_status(client, stream, group)
        if part_pending is None:
            return None, None
        pending = None if pending is None else pending + part_pending
        lag = None if lag is None or part_lag is None else lag + part_lag
    return pending, lag
