"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` has these through :class:`PublishOperations`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis

from .config import Duration, positive, seconds
from .errors import NotReplicatedError
from .message import encode_entry
from .topic.partitions import partition_for_key
from .tracing import with_trace_context
from .wire import resp
from .wire.client import ride_through, translated
from .wire.routing import Deployment

Fields = dict[bytes | str, bytes | str]
Key = str | bytes


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
    ) -> str:
        """Add one message; return its entry ID. Raises MessageFormatError for bad input.

        ``key`` (str or bytes): on a partitioned topic, messages with the same key go to
        the same partition, in publish order; without one they take the partitions in
        turn. The ID names the partition (``"3:<ms>-<seq>"``) on a partitioned topic.
        ``replicas``: return only once that many replicas have the entry (``WAIT``, at
        most ``timeout``), else raise NotReplicatedError (the entry was added): for
        messages that must survive a failover of the master.
        """
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        fields = encode_entry(message_type, data, meta)
        partition = self._partition(key)
        stream = self.streams[partition]
        if replicas:
            wait = seconds(timeout, "timeout")
            return self._named(
                partition, await self._publish_durably(stream, fields, replicas, wait, partition)
            )
        client = self.client_for(stream)

        async def xadd() -> str:
            with translated(stream):
                return str((await client.xadd(stream, fields)).decode())

        return self._named(partition, await ride_through(self.deployment, xadd))

    async def _publish_durably(
        self, stream: str, fields: Fields, replicas: int, wait: float, partition: int = 0
    ) -> str:
        positive(replicas, "replicas")
        client = self.client_for(stream)

        async def xadd_and_wait() -> tuple[str, int]:
            with translated(stream):
                pipe = client.pipeline(transaction=False)
                pipe.xadd(stream, fields)
                pipe.execute_command("WAIT", replicas, max(1, int(wait * 1000)))
                entry_id, reached = await pipe.execute()
            return entry_id.decode(), int(reached)

        entry_id, reached = await ride_through(self.deployment, xadd_and_wait)
        if reached < replicas:
            entry_id = self._named(partition, entry_id)  # as publish would have returned it
            raise NotReplicatedError(
                f"entry {entry_id} reached {reached} of {replicas} replica(s) within {wait:g}s; "
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
                with translated(stream):
                    return await resp.execute(client, packed, count)

            ids.extend(i.decode() for i in await ride_through(self.deployment, send))
        return ids
