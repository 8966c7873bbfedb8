"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` has these through :class:`PublishOperations`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from .config import Duration, positive, seconds
from .errors import NotReplicatedError, ServerUnavailableError
from .message import encode_entry
from .publisher import xadd_chunks
from .tracing import with_trace_context
from .wire import idempotency, resp
from .wire.client import ride_through, translated
from .wire.coalesce import Coalescer
from .wire.features import Features, probe
from .wire.routing import Deployment

Fields = dict[bytes | str, bytes | str]
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

    async def publish(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        *,
        replicas: int = 0,
        timeout: Duration = 1.0,  # noqa: ASYNC109  # the server's WAIT timeout
        fsync: bool = False,
        idempotency_key: str | None = None,
    ) -> str:
        """Add one message; return its entry ID. Raises MessageFormatError for bad input.

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
        key = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        if replicas:
            wait = seconds(timeout, "timeout")
            return await self._publish_durably(fields, replicas, wait, fsync=fsync, key=key)
        if key is None:
            try:  # the usual case, without the wrappers below (a fifth of a publish's CPU)
                return await self.coalescer.xadd(self.client, self.stream, fields)
            except (RedisError, OSError) as e:
                await self._after_failed_attempt(e)

        async def xadd() -> str:
            with translated(self.stream):
                if key is not None:
                    return await self._xadd_once(fields, key)
                return await self.coalescer.xadd(self.client, self.stream, fields)

        return await ride_through(self.deployment, xadd)

    async def _after_failed_attempt(self, error: Exception) -> None:
        """Raise ``error`` translated, unless it is transient on a deployment that fails
        over (a cluster, Sentinel): then wait a moment, and the caller rides through."""
        try:
            with translated(self.stream):
                raise error
        except ServerUnavailableError:
            if not self.deployment.fails_over:
                raise
        await anyio.sleep(FIRST_RETRY_DELAY)

    async def _xadd_once(self, fields: Fields, key: str) -> str:
        if (await self._server_features()).xadd_idmp:
            options = idempotency.idmp_options(key)
            return await self.coalescer.xadd(self.client, self.stream, fields, options)
        return await idempotency.fallback_xadd(self.client, self.stream, key, fields)

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
        self, fields: Fields, replicas: int, wait: float, *, fsync: bool, key: str | None
    ) -> str:
        positive(replicas, "replicas")
        wait_command = durable_wait(replicas, wait, fsync=fsync)

        async def xadd_and_wait() -> tuple[str, int]:
            with translated(self.stream):
                add = await self._xadd_command(fields, key)
                pipe = self.client.pipeline(transaction=False)
                pipe.execute_command(*add)
                pipe.execute_command(*wait_command)
                entry_id, reached = await pipe.execute()
            return entry_id.decode(), int(reached[1] if fsync else reached)

        entry_id, reached = await ride_through(self.deployment, xadd_and_wait)
        if reached < replicas:
            where = "written to the append-only file of" if fsync else "reached"
            raise NotReplicatedError(
                f"entry {entry_id} {where} {reached} of {replicas} replica(s) within {wait:g}s; "
                "it is in the stream, but a failover now could lose it",
                entry_id=entry_id, replicas=reached,
            )  # fmt: skip
        return entry_id

    async def _xadd_command(self, fields: Fields, key: str | None) -> list[Any]:
        """The XADD (or the idempotent fallback's EVAL) a durable publish pipelines."""
        if key is not None and not (await self._server_features()).xadd_idmp:
            return idempotency.fallback_command(self.stream, key, fields)
        options = () if key is None else idempotency.idmp_options(key)
        flat = [item for pair in fields.items() for item in pair]
        return ["XADD", self.stream, *options, "*", *flat]

    async def publish_many(
        self,
        message_type: str,
        items: Iterable[Any],
        meta: Mapping[str, str] | None = None,
        *,
        chunk: int = 1000,
    ) -> list[str]:
        """Add many messages of one type with pipelined XADD; return their IDs in order."""
        meta = with_trace_context(meta)
        ids: list[str] = []
        for packed, count in xadd_chunks(self.stream, message_type, items, meta, chunk):

            async def send(packed: bytes = packed, count: int = count) -> list[Any]:
                with translated(self.stream):
                    return await resp.execute(self.client, packed, count)

            ids.extend(i.decode() for i in await ride_through(self.deployment, send))
        return ids
