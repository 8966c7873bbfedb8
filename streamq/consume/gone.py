"""Is the topic or the group really gone? Checked before a consumer stops on its own.

A read answering "no such group" or "no such stream", or a terminate notice, is only a
reason to look: a failover or a slot migration can give the same answers for a moment, and
a notice can be forged. The consumer stops only for what Redis confirms.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis

from ..errors import RedisFailure, ServerUnavailableError
from ..topic.control import was_terminated
from ..wire import replies

log = logging.getLogger(__name__)

# A blocked XREADGROUP is ended by the server when its stream or group is deleted; a blocked
# XREAD (a fan-out subscriber's read, an ordered partition's wait for new entries) is not.
# So an XREAD blocks at most this long, then the consumer looks whether its stream is gone:
# a stream deleted by anyone stops it within about this time, whatever its ``block``.
XREAD_BLOCK_MAX = 1.0


def xread_block(block: float) -> float:
    """How long a blocked XREAD waits, for a consumer whose ``block`` is ``block``."""
    return min(block, XREAD_BLOCK_MAX)


async def why_gone(client: aioredis.Redis, stream: str, group: str) -> str | None:
    """``topic_terminated``, ``stream_deleted`` or ``group_deleted``; None if both exist.

    The stream is looked for before the terminate mark: the mark is set in the transaction
    that deletes the stream, so a stream found gone whose mark is then missing was deleted,
    not terminated (looked at the other way round, a terminate between the two reads would
    pass for a deletion)."""
    exists = await client.exists(stream)
    if await was_terminated(client, stream):
        return "topic_terminated"
    if not exists:
        return "stream_deleted"
    groups = replies.groups(await client.xinfo_groups(stream))
    if not any(g.name == group for g in groups):
        return "group_deleted"
    return None


async def confirmed_gone(
    client: aioredis.Redis, stream: str, group: str, *, hint: str, failure_means_gone: bool
) -> str | None:
    """The reason to stop if Redis confirms ``hint``; None if both exist or if the check
    cannot be made now (the server or the cluster is away or changing: try again later).
    A check that fails for good counts as ``group_deleted`` if ``failure_means_gone``."""
    return await confirmed_any_gone(
        lambda _: client, (stream,), group, hint=hint, failure_means_gone=failure_means_gone
    )


async def confirmed_any_gone(
    client_for: Callable[[str], aioredis.Redis],
    streams: Sequence[str],
    group: str,
    *,
    hint: str,
    failure_means_gone: bool,
) -> str | None:
    """:func:`confirmed_gone` for a topic's partition streams, of which ``hint`` names one
    only in its text: the reason of the first that Redis confirms gone."""
    try:
        for stream in streams:
            reason = await why_gone(client_for(stream), stream, group)
            if reason is not None:
                return reason
    except ServerUnavailableError as e:
        log.warning("%s; cannot check it now: %s", hint, e)
        return None
    except RedisFailure as e:
        if not failure_means_gone:
            log.warning("%s; cannot check it: %s", hint, e)
            return None
        return "group_deleted"
    named = ", ".join(repr(stream) for stream in streams)
    log.warning("%s, but stream %s and group %r exist: going on", hint, named, group)
    return None
