"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` has these through :class:`PublishOperations`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis

from .config import Duration, positive, seconds
from .errors import NotReplicatedError
from .message import encode_entry
from .publisher import xadd_chunks
from .tracing import with_trace_context
from .wire import resp
from .wire.client import ride_through, translated
from .wire.coalesce import Coalescer
from .wire.routing import Deployment

Fields = dict[bytes | str, bytes | str]


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
    ) -> str:
        """Add one message; return its entry ID. Raises MessageFormatError for bad input.

        ``replicas``: return only once that many replicas have the entry (``WAIT``, at
        most ``timeout``), else raise NotReplicatedError (the entry was added): for
        messages that must survive a failover of the master. ``fsync=True``: once that
        many replicas have also written it to their append-only file (``WAITAOF``, Redis
        >= 7.2 and Valkey; the replicas need ``appendonly yes`` and ``appendfsync
        everysec`` or ``always``).
        """
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        fields = encode_entry(message_type, data, meta)
        if replicas:
            wait = seconds(timeout, "timeout")
            return await self._publish_durably(fields, replicas, wait, fsync=fsync)

        async def xadd() -> str:
            with translated(self.stream):
                return await self.coalescer.xadd(self.client, self.stream, fields)

        return await ride_through(self.deployment, xadd)

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
        self, fields: Fields, replicas: int, wait: float, *, fsync: bool = False
    ) -> str:
        positive(replicas, "replicas")
        wait_command = durable_wait(replicas, wait, fsync=fsync)

        async def xadd_and_wait() -> tuple[str, int]:
            with translated(self.stream):
                pipe = self.client.pipeline(transaction=False)
                pipe.xadd(self.stream, fields)
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
