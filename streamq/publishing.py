"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` has these through :class:`PublishOperations`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import redis.asyncio as aioredis

from .config import Duration, positive, seconds
from .errors import NotReplicatedError, ServerUnavailableError
from .message import encode_entry
from .topic.partitions import check_partition_count, partition_for_key
from .tracing import with_trace_context
from .wire import idempotency, resp
from .wire.client import ride_through
from .wire.coalesce import Coalescer
from .wire.features import Features, probe
from .wire.routing import Deployment
from .wire.timeouts import blocking_timeout

Fields = dict[bytes | str, bytes | str]
Key = str | bytes
FIRST_RETRY_DELAY = 0.05  # as ride_through's first backoff


def durable_wait(replicas: int, wait: float, *, fsync: bool) -> tuple[str | int, ...]:
    """``WAIT replicas ms``, or with ``fsync`` ``WAITAOF 0 replicas ms`` (this master's own
    fsync is not waited for: it may run without an append-only file)."""
    ms = max(1, int(wait * 1000))
    return ("WAITAOF", 0, replicas, ms) if fsync else ("WAIT", replicas, ms)


class PublishOperations:
    """The publishing side of a queue on ``stream``."""

    stream: str

    @property
    def client(self) -> aioredis.Redis:
        raise NotImplementedError

    @property
    def deployment(self) -> Deployment:
        raise NotImplementedError

    partitions: int
    streams: tuple[str, ...]
    _turn: int = -1  # the partition the last keyless publish went to

    def client_for(self, stream: str) -> aioredis.Redis:
        raise NotImplementedError

    async def check_shape(self) -> None:
        """Check the topic's recorded partition count against this queue's (recording it
        the first time), as ``open()`` does; a queue that publishes without being opened
        does it at its first publish (once per connection): a plain queue's publish to a
        partitioned topic would go to a stream no consumer reads."""
        deployment = self.deployment
        await check_partition_count(self.client, self.stream, self.partitions)
        self.__dict__["_shape_of"] = deployment

    async def _check_shape_once(self) -> None:
        """:meth:`check_shape` for publishes without ``open()``: one at a time (200 first
        publishes at once make one check, not 200 on as many connections)."""
        lock = self.__dict__.setdefault("_shape_lock", anyio.Lock())
        async with lock:
            if self.__dict__.get("_shape_of") is not self.deployment:
                await ride_through(self.deployment, self.check_shape)

    def _partition(self, key: Key | None) -> int:
        """The partition of a message: by its key's hash, else the next in turn."""
        if key is not None:
            return partition_for_key(key, self.partitions)
        if self.partitions == 1:
            return 0
        self._turn = (self._turn + 1) % self.partitions
        return self._turn

    def _named(self, partition: int, entry_id: str) -> str:
        return entry_id if self.partitions == 1 else f"{partition}:{entry_id}"

    async def publish(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | None = None,
        replicas: int = 0,
        timeout: Duration = 1.0,  # noqa: ASYNC109  # the server's WAIT timeout
        fsync: bool = False,
        idempotency_key: str | None = None,
    ) -> str:
        """Add one message; return its entry ID. Raises MessageFormatError for bad input.

        ``key`` (str or bytes): on a partitioned topic, messages with the same key go to
        the same partition, in publish order; without one they take the partitions in
        turn. The ID names the partition (``"3:<ms>-<seq>"``) on a partitioned topic.

        ``replicas``: return only once that many replicas have the entry (``WAIT``, at
        most ``timeout``), else raise NotReplicatedError (the entry was added): for
        messages that must survive a failover of the master. ``fsync=True``: once that
        many replicas have also written it to their append-only file (``WAITAOF``, Redis
        >= 7.2 and Valkey; the replicas need ``appendonly yes`` and ``appendfsync
        everysec`` or ``always``).

        ``idempotency_key``: at most one entry per key (within a window): publishing again
        with a key already used returns the first entry's ID and adds nothing, so a
        producer may retry a publish whose reply it lost (:mod:`streamq.wire.idempotency`:
        ``XADD ... IDMP`` on Redis >= 8.6, a script elsewhere).
        """
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        fields = encode_entry(message_type, data, meta)
        if self.__dict__.get("_shape_of") is not self.deployment:  # inline: the hot path
            await self._check_shape_once()
        once = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        partition = self._partition(key)
        stream = self.streams[partition]
        client = self.client_for(stream)
        if replicas:
            wait = seconds(timeout, "timeout")
            entry_id = await self._publish_durably(
                client, stream, fields, replicas, wait, fsync=fsync, key=once, partition=partition
            )
            return self._named(partition, entry_id)
        if once is None:
            try:  # the usual case, without the wrappers below (a fifth of a publish's CPU)
                return self._named(partition, await self.coalescer.xadd(client, stream, fields))
            except ServerUnavailableError:
                if not self.deployment.fails_over:
                    raise
                await anyio.sleep(FIRST_RETRY_DELAY)  # then ride through (a failover)

        async def xadd() -> str:
            if once is not None:
                return await self._xadd_once(client, stream, fields, once)
            return await self.coalescer.xadd(client, stream, fields)

        return self._named(partition, await ride_through(self.deployment, xadd))

    async def _xadd_once(
        self, client: aioredis.Redis, stream: str, fields: Fields, key: str
    ) -> str:
        if (await self._server_features()).xadd_idmp:
            options = idempotency.idmp_options(key)
            return await self.coalescer.xadd(client, stream, fields, options)
        return await idempotency.fallback_xadd(client, stream, key, fields)

    async def _server_features(self) -> Features:
        """What the server supports beyond Redis 7.0 (:mod:`streamq.wire.features`),
        asked once per connection to a deployment."""
        deployment = self.deployment
        known = self.__dict__.get("_features")
        if known is None or known[0] is not deployment:
            known = self.__dict__["_features"] = (deployment, await probe(self.client))
        found: Features = known[1]
        return found

    @property
    def coalescer(self) -> Coalescer:
        """Concurrent publishes share pipelined writes (:mod:`streamq.wire.coalesce`); one
        coalescer per deployment (a reopened queue has new connections)."""
        deployment = self.deployment
        mine = self.__dict__.get("_coalescer")
        if mine is None or mine[0] is not deployment:
            mine = self.__dict__["_coalescer"] = (deployment, Coalescer())
        coalescer: Coalescer = mine[1]
        return coalescer

    async def _publish_durably(
        self,
        client: aioredis.Redis,
        stream: str,
        fields: Fields,
        replicas: int,
        wait: float,
        *,
        fsync: bool,
        key: str | None,
        partition: int,
    ) -> str:
        positive(replicas, "replicas")
        wait_command = durable_wait(replicas, wait, fsync=fsync)

        async def xadd_and_wait() -> tuple[str, int]:
            add = await self._xadd_command(stream, fields, key)
            packed = resp.pack_command(add) + resp.pack_command(wait_command)
            # WAIT holds its reply up to `wait`: more than the usual socket timeout
            entry_id, reached = await resp.execute(
                client, packed, 2, read_timeout=blocking_timeout(wait)
            )
            return entry_id.decode(), int(reached[1] if fsync else reached)

        entry_id, reached = await ride_through(self.deployment, xadd_and_wait)
        if reached < replicas:
            named = self._named(partition, entry_id)  # as publish would have returned it
            where = "written to the append-only file of" if fsync else "reached"
            raise NotReplicatedError(
                f"entry {named} {where} {reached} of {replicas} replica(s) within {wait:g}s; "
                "it is in the stream, but a failover now could lose it",
                entry_id=named, replicas=reached,
            )  # fmt: skip
        return entry_id

    async def _xadd_command(self, stream: str, fields: Fields, key: str | None) -> list[Any]:
        """The XADD (or the idempotent fallback's EVAL) a durable publish pipelines."""
        if key is not None and not (await self._server_features()).xadd_idmp:
            return idempotency.fallback_command(stream, key, fields)
        options = () if key is None else idempotency.idmp_options(key)
        flat = [item for pair in fields.items() for item in pair]
        return ["XADD", stream, *options, "*", *flat]

    async def publish_many(
        self,
        message_type: str,
        items: Iterable[Any],
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | Callable[[Any], Key] | None = None,
        chunk: int = 1000,
    ) -> list[str]:
        """Add many messages of one type with pipelined XADD; return their IDs in order.

        ``key``: one key for all, or a function giving each item's key (on a partitioned
        topic; see :meth:`publish`). Every item is encoded before anything is sent: a bad
        one raises MessageFormatError and nothing is published.
        """
        meta = with_trace_context(meta)
        items = list(items)
        encoded = [encode_entry(message_type, item, meta) for item in items]
        if self.__dict__.get("_shape_of") is not self.deployment:
            await self._check_shape_once()
        by_partition: dict[int, list[int]] = {}
        for position, item in enumerate(items):
            one_key = key(item) if callable(key) else key
            by_partition.setdefault(self._partition(one_key), []).append(position)
        ids: list[str] = [""] * len(encoded)
        for partition, positions in by_partition.items():
            sent = await self._send_chunks(partition, [encoded[i] for i in positions], chunk)
            for position, entry_id in zip(positions, sent, strict=True):
                ids[position] = self._named(partition, entry_id)
        return ids

    async def _send_chunks(self, partition: int, entries: list[Fields], chunk: int) -> list[str]:
        stream = self.streams[partition]
        client = self.client_for(stream)
        ids: list[str] = []
        for start in range(0, len(entries), chunk):
            packed, count = resp.pack_xadds(stream, entries[start : start + chunk])

            async def send(packed: bytes = packed, count: int = count) -> list[Any]:
                return await resp.execute(client, packed, count)

            ids.extend(i.decode() for i in await ride_through(self.deployment, send))
        return ids
