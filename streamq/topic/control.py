"""Stop/resume of single entry IDs and topic termination, and the control channel.

Stopped IDs are global: one hash per stream (see :mod:`streamq.wire.scripts`), shared by every
consumer of every group, persisted in Redis. Each consumer keeps a local copy (so checking
an entry costs no round trip), updated through the pub/sub channel
``streamq:{<stream>}:control`` and resynchronised periodically as a safety net.

Anyone who may PUBLISH on the channel can send a notice, so a notice is only a hint: it is
validated (size, shape, ID syntax; a bad one is dropped with a warning) and checked against
Redis before a consumer acts on it (a stopped ID must be in the stopped hash, a terminated
topic must really be gone).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import anyio
import redis.asyncio as aioredis

from .._backoff import Backoff
from .._ids import StreamId
from ..errors import (
    InvalidMessageIdError,
    MessageNotFoundError,
    RedisFailure,
    ServerUnavailableError,
)
from ..wire import records
from ..wire.damage import set_aside
from ..wire.keys import Keys
from ..wire.liveness import Liveness
from ..wire.records import DamagedRecord
from ..wire.replies import text
from ..wire.scripts import HOLD_MESSAGE, RESUME_MESSAGE, STOP_MESSAGE
from ..wire.translate import translated
from ..wire.wrong_type import refused_if_wrong_type, unless_wrong_type

log = logging.getLogger(__name__)

RESUME_CLAIMER = "streamq:resumed"
# Idle time given to a resumed entry so that any consumer's XAUTOCLAIM takes it at once.
RESUMED_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
TERMINATED_MARK_TTL_MS = 10_000
LISTENER_BACKOFF = 0.5
MAX_LISTENER_BACKOFF = 10.0
# The largest notice streamq sends is ~60 bytes; anything much larger is not ours.
MAX_NOTICE_BYTES = 512
# a stopped record of another type than a hash: what consumers and operators get
NOT_OBEYED = "no entry is held as stopped by it"
REFUSED = "stop and resume are refused until it is repaired (DEL it) or the topic terminated"


def terminated_mark(keys: Keys) -> str:
    return keys.prefix + "terminated"


@dataclass
class StoppedView:
    """This process's copy of the stopped-ID set."""

    ids: set[str] = field(default_factory=set)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.ids

    async def resync(self, client: aioredis.Redis, stream: str) -> None:
        key = Keys(stream).stopped
        raw = await unless_wrong_type(client.hkeys(key), client, "stopped", key, "hash", [],
                                      NOT_OBEYED)  # fmt: skip
        self.ids = {text(k) for k in raw}


async def stop_message(client: aioredis.Redis, stream: str, entry_id: str) -> int:
    """Stop ``entry_id`` everywhere; return how many groups it was taken from."""
    keys = Keys(stream)
    entry_id = str(StreamId.parse(entry_id))
    stop = client.eval(STOP_MESSAGE, 2, stream, keys.stopped, entry_id)
    held = int(await refused_if_wrong_type(stop, client, "stopped", keys.stopped, "hash", REFUSED))
    if held < 0:
        raise MessageNotFoundError(f"entry {entry_id} does not exist in stream {stream!r}")
    await _announce(client, keys, "stop", entry_id)
    return held


async def resume_message(client: aioredis.Redis, stream: str, entry_id: str) -> int:
    """Resume a stopped ID; return the number of groups it was given back to."""
    keys = Keys(stream)
    entry_id = str(StreamId.parse(entry_id))
    resume = client.eval(
        RESUME_MESSAGE, 2, stream, keys.stopped, entry_id, RESUME_CLAIMER, RESUMED_IDLE_MS
    )
    restored = int(
        await refused_if_wrong_type(resume, client, "stopped", keys.stopped, "hash", REFUSED)
    )
    if restored < 0:
        raise MessageNotFoundError(f"entry {entry_id} of {stream!r} is not stopped")
    await _announce(client, keys, "resume", entry_id)
    return restored


async def hold_message(client: aioredis.Redis, stream: str, group: str, entry_id: str) -> bool:
    """Take a stopped entry out of ``group``'s pending list; False if it was resumed."""
    keys = Keys(stream)
    return bool(await client.eval(HOLD_MESSAGE, 2, stream, keys.stopped, entry_id, group))


async def stopped_ids(client: aioredis.Redis, stream: str) -> list[str]:
    """The stopped IDs of ``stream`` in ID order (a field that is no ID is set aside)."""
    key = Keys(stream).stopped
    ids = []
    for name in await client.hkeys(key):
        found = records.stopped_id(key, name)
        if isinstance(found, DamagedRecord):
            set_aside(found, "not listed")
        else:
            ids.append(found)
    return sorted(ids, key=StreamId.parse)


async def terminate_topic(
    client: aioredis.Redis,
    stream: str,
    *,
    keep_dead_letters: bool = False,
    group_keys: Sequence[str] = (),
) -> None:
    """Delete the stream, its groups and streamq's keys, with ``group_keys`` (keys of
    its groups on its slot: ordered mode's); tell running consumers to stop."""
    keys = Keys(stream)
    doomed = [stream, *keys.own_keys(), *group_keys]
    if not keep_dead_letters:
        doomed.append(keys.dead_letters)
    at = await server_ms(client)  # the mark says when: a later subscriber is not stopped by it
    pipe = client.pipeline(transaction=True)
    pipe.set(terminated_mark(keys), str(at), px=TERMINATED_MARK_TTL_MS)
    pipe.delete(*doomed)
    await pipe.execute()
    # The notice comes after, not inside, the transaction: a cluster node runs a
    # transaction that publishes to a shard channel without its checks for a slot
    # being migrated (the keys already moved would stay, a mark left behind).
    await client.spublish(keys.control, json.dumps({"op": "terminate"}))


async def server_ms(client: aioredis.Redis) -> int:
    """The server's clock (``TIME``), in milliseconds."""
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def was_terminated(client: aioredis.Redis, stream: str, since_ms: int | None = None) -> bool:
    """Whether the topic of ``stream`` was terminated in the last seconds (its mark is
    kept ``TERMINATED_MARK_TTL_MS``); with ``since_ms`` (the server's clock), only a
    terminate at or after it counts: a subscriber started after a terminate reads the
    topic made again. A mark that holds no time (damaged) counts."""
    mark = await client.get(terminated_mark(Keys(stream)))
    if mark is None:
        return False
    if since_ms is None or not mark.isdigit():
        return True
    return int(mark) >= since_ms


async def _announce(client: aioredis.Redis, keys: Keys, op: str, entry_id: str) -> None:
    await client.spublish(keys.control, json.dumps({"op": op, "id": entry_id}))


@dataclass(frozen=True, slots=True)
class Notice:
    """A well-formed control notice: ``stop``/``resume`` of an ID, or ``terminate``."""

    op: Literal["stop", "resume", "terminate"]
    entry_id: str | None = None


def parse_notice(data: bytes | str) -> Notice | None:
    """The notice in ``data``, or None if it is not one streamq could have sent."""
    if len(data) > MAX_NOTICE_BYTES:
        return None
    try:
        notice = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(notice, dict):
        return None
    op, entry_id = notice.get("op"), notice.get("id")
    if op == "terminate":
        return Notice("terminate")
    if op not in ("stop", "resume") or not isinstance(entry_id, str):
        return None
    try:
        return Notice(op, str(StreamId.parse(entry_id)))
    except InvalidMessageIdError:
        return None


class ControlListener:
    """Follows the control channel and keeps a StoppedView current.

    ``on_terminate`` is told that a terminate notice arrived; it checks that the topic is
    really gone before stopping anything (see :class:`streamq.consume.consumer.Consumer`).
    Without a ``view`` (a fan-out subscriber: no group, nothing stopped for it) only
    terminate notices are followed.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        view: StoppedView | None,
        *,
        resync_interval: float,
        on_stop: Callable[[str], None],
        on_resume: Callable[[str], None],
        on_terminate: Callable[[], Awaitable[None]],
    ) -> None:
        self._client = client
        self._stream = stream
        self._keys = Keys(stream)
        self._view = view
        self._resync_interval = resync_interval
        self._on_stop, self._on_resume, self._on_terminate = on_stop, on_resume, on_terminate
        self._lost = False

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started, backoff = False, Backoff(LISTENER_BACKOFF, MAX_LISTENER_BACKOFF)
        while True:
            try:
                with translated(self._stream):
                    async with self._client.pubsub() as pubsub:
                        await pubsub.ssubscribe(self._keys.control)
                        await self._resync()
                        self._connected()
                        backoff.reset()
                        if not started:
                            started = True
                            task_status.started()
                        await self._follow(pubsub)
            except RedisFailure as e:
                delay = backoff.next()
                self._disconnected(e, delay)
                if not started:
                    started = True
                    task_status.started()
                await anyio.sleep(delay)

    async def _resync(self) -> None:
        if self._view is not None:
            await self._view.resync(self._client, self._stream)

    def _connected(self) -> None:
        if self._lost:
            self._lost = False
            log.info("control channel %s is back", self._keys.control)

    def _disconnected(self, error: BaseException, backoff: float) -> None:
        """Log once per outage, not once per reconnection attempt."""
        if not self._lost:
            self._lost = True
            log.warning(
                "control channel lost, reconnecting with backoff (first in %.1fs): %s",
                backoff, error,
            )  # fmt: skip

    async def _follow(self, pubsub: aioredis.client.PubSub) -> None:
        resync_at = anyio.current_time() + self._resync_interval
        live = Liveness.of(pubsub)
        while True:
            timeout = max(min(resync_at, live.due) - anyio.current_time(), 0.0)
            message = await pubsub.get_message(timeout=timeout)
            if message is not None and message["type"] == "pong":
                live.answered()
            if message is not None and message["type"] == "sunsubscribe":
                # A cluster node drops its sharded subscribers when the channel's slot
                # moves (reshard, failover): subscribe again, on the slot's new master.
                raise ServerUnavailableError("the server ended the control subscription")
            if message is not None and message["type"] in ("smessage", "message"):
                try:
                    await self._apply(message["data"])
                except RedisFailure:
                    raise  # reconnect
                except Exception:  # a notice must never end the listener
                    log.exception("could not apply a control notice; ignored")
            if anyio.current_time() >= resync_at:
                await self._resync()
                resync_at = anyio.current_time() + self._resync_interval
            await live.check(pubsub)

    async def _apply(self, data: bytes | str) -> None:
        notice = parse_notice(data)
        if notice is None:
            log.warning("ignoring a malformed control notice (%d bytes): %.80r", len(data), data)
            return
        if notice.op == "terminate":
            await self._on_terminate()
            return
        if self._view is None:
            return  # stop and resume: of a group's entries
        assert notice.entry_id is not None
        key, client = self._keys.stopped, self._client
        read = client.hexists(key, notice.entry_id)
        stopped = bool(await unless_wrong_type(read, client, "stopped", key, "hash", 0, NOT_OBEYED))
        if notice.op == "stop" and stopped:
            self._view.ids.add(notice.entry_id)
            self._on_stop(notice.entry_id)
        elif notice.op == "resume" and not stopped:
            self._view.ids.discard(notice.entry_id)
            self._on_resume(notice.entry_id)
        else:
            log.warning(
                "ignoring a %s notice for %s: Redis says it is %s",
                notice.op, notice.entry_id, "stopped" if stopped else "not stopped",
            )  # fmt: skip
