"""Stop/resume of single entry IDs and topic termination, and the control channel.

Stopped IDs are global: one hash per stream (see :mod:`streamq.scripts`), shared by every
consumer of every group, persisted in Redis. Each consumer keeps a local copy (so checking
an entry costs no round trip), updated through the pub/sub channel
``streamq:{<stream>}:control`` and resynchronised periodically as a safety net.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import redis.asyncio as aioredis
from redis import exceptions as rx

from ._redis import text, translated
from .errors import MessageNotFoundError
from .ids import StreamId
from .keys import Keys
from .scripts import HOLD_MESSAGE, RESUME_MESSAGE, STOP_MESSAGE

log = logging.getLogger(__name__)

RESUME_CLAIMER = "streamq:resumed"
# Idle time given to a resumed entry so that any consumer's XAUTOCLAIM takes it at once.
RESUMED_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
TERMINATED_MARK_TTL_MS = 10_000
LISTENER_BACKOFF = 0.5


def terminated_mark(keys: Keys) -> str:
    return keys.prefix + "terminated"


@dataclass
class StoppedView:
    """This process's copy of the stopped-ID set."""

    ids: set[str] = field(default_factory=set)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.ids

    async def resync(self, client: aioredis.Redis, keys: Keys) -> None:
        raw = await client.hkeys(keys.stopped)
        self.ids = {text(k) for k in raw}


async def stop_message(client: aioredis.Redis, stream: str, entry_id: str) -> int:
    """Stop ``entry_id`` everywhere; return how many groups it was taken from."""
    keys = Keys(stream)
    entry_id = str(StreamId.parse(entry_id))
    with translated(stream):
        held = int(await client.eval(STOP_MESSAGE, 2, stream, keys.stopped, entry_id))
        if held < 0:
            raise MessageNotFoundError(f"entry {entry_id} does not exist in stream {stream!r}")
        await _announce(client, keys, "stop", entry_id)
    return held


async def resume_message(client: aioredis.Redis, stream: str, entry_id: str) -> int:
    """Resume a stopped ID; return the number of groups it was given back to."""
    keys = Keys(stream)
    entry_id = str(StreamId.parse(entry_id))
    with translated(stream):
        restored = int(
            await client.eval(
                RESUME_MESSAGE, 2, stream, keys.stopped, entry_id, RESUME_CLAIMER, RESUMED_IDLE_MS
            )
        )
        if restored < 0:
            raise MessageNotFoundError(f"entry {entry_id} of {stream!r} is not stopped")
        await _announce(client, keys, "resume", entry_id)
    return restored


async def hold_message(client: aioredis.Redis, stream: str, group: str, entry_id: str) -> bool:
    """Take a stopped entry out of ``group``'s pending list; False if it was resumed."""
    keys = Keys(stream)
    with translated(stream, group):
        return bool(await client.eval(HOLD_MESSAGE, 2, stream, keys.stopped, entry_id, group))


async def stopped_ids(client: aioredis.Redis, stream: str) -> list[str]:
    raw = await client.hkeys(Keys(stream).stopped)
    ids = [text(k) for k in raw]
    return sorted(ids, key=StreamId.parse)


async def terminate_topic(
    client: aioredis.Redis, stream: str, *, keep_dead_letters: bool = False
) -> None:
    """Delete the stream, its groups and streamq's keys; tell running consumers to stop."""
    keys = Keys(stream)
    doomed = [stream, *keys.own_keys()]
    if not keep_dead_letters:
        doomed.append(keys.dead_letters)
    pipe = client.pipeline(transaction=True)
    pipe.set(terminated_mark(keys), "1", px=TERMINATED_MARK_TTL_MS)
    pipe.delete(*doomed)
    pipe.publish(keys.control, json.dumps({"op": "terminate"}))
    with translated(stream):
        await pipe.execute()


async def was_terminated(client: aioredis.Redis, stream: str) -> bool:
    return bool(await client.exists(terminated_mark(Keys(stream))))


async def _announce(client: aioredis.Redis, keys: Keys, op: str, entry_id: str) -> None:
    await client.publish(keys.control, json.dumps({"op": op, "id": entry_id}))


class ControlListener:
    """Follows the control channel and keeps a StoppedView current."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        view: StoppedView,
        *,
        resync_interval: float,
        on_stop: Callable[[str], None],
        on_resume: Callable[[str], None],
        on_terminate: Callable[[], None],
    ) -> None:
        self._client = client
        self._keys = Keys(stream)
        self._view = view
        self._resync_interval = resync_interval
        self._on_stop, self._on_resume, self._on_terminate = on_stop, on_resume, on_terminate

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        while True:
            try:
                async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._keys.control)
                    await self._view.resync(self._client, self._keys)
                    if not started:
                        started = True
                        task_status.started()
                    await self._follow(pubsub)
            except (rx.RedisError, OSError) as e:
                log.warning("control channel lost, reconnecting in %.1fs: %s", LISTENER_BACKOFF, e)
                if not started:
                    started = True
                    task_status.started()
                await anyio.sleep(LISTENER_BACKOFF)

    async def _follow(self, pubsub: aioredis.client.PubSub) -> None:
        resync_at = anyio.current_time() + self._resync_interval
        while True:
            timeout = max(resync_at - anyio.current_time(), 0.0)
            message = await pubsub.get_message(timeout=timeout)
            if message is not None:
                self._apply(message["data"])
            if anyio.current_time() >= resync_at:
                await self._view.resync(self._client, self._keys)
                resync_at = anyio.current_time() + self._resync_interval

    def _apply(self, data: bytes | str) -> None:
        try:
            notice = json.loads(data)
            op, entry_id = notice["op"], notice.get("id")
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed control notice %r", data)
            return
        if op == "stop" and entry_id:
            self._view.ids.add(entry_id)
            self._on_stop(entry_id)
        elif op == "resume" and entry_id:
            self._view.ids.discard(entry_id)
            self._on_resume(entry_id)
        elif op == "terminate":
            self._on_terminate()
