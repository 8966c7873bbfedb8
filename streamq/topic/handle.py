"""One topic as every part of a queue reaches it: its streams, their clients, its shape.

A :class:`TopicHandle` is shared by the parts of a :class:`~streamq.MessageQueue` that
publish, schedule, administer the topic and consume, and by the dashboard's view of a
topic. It owns the deployment (connected on first use, closed by :meth:`close`), a client
per stream, each partition's copy of the stopped IDs, the partition of a message, and the
check of the topic's recorded partition count (once per connection).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import redis.asyncio as aioredis

from ..payload.encoding import PLAIN, PayloadCodec
from ..wire.client import ride_through
from ..wire.partition_names import choose_partition, default_level, topic_streams
from ..wire.routing import Deployment
from .control import StoppedView
from .partitions import check_partition_count, recorded_partitions, recorded_priorities

Key = str | bytes


class TopicHandle:
    """The topic ``stream`` in ``partitions`` partitions, on the deployment ``connect``
    makes when a part first needs it."""

    def __init__(
        self,
        stream: str,
        partitions: int,
        connect: Callable[[], Deployment],
        priorities: int = 1,
    ) -> None:
        self.stream = stream
        self._connect = connect
        self._deployment: Deployment | None = None
        self._client: aioredis.Redis | None = None
        self._clients: dict[str, aioredis.Redis] = {}
        self._turns = 0  # keyless publishes so far: the next goes to this one's partition
        self.shape_checked_on: Deployment | None = None  # the deployment last checked on
        self._shape_checked_at = -1.0  # when its record was last checked again
        self._shape_lock: anyio.Lock | None = None
        self.codec: PayloadCodec = PLAIN  # how payloads are written (the queue's settings)
        self.use_partitions(partitions, priorities)

    def use_partitions(self, partitions: int, priorities: int = 1) -> None:
        """Take ``partitions`` and ``priorities`` as the topic's shape: its streams (one per
        partition and level; IDs name their index) and their stopped IDs."""
        self.partitions = partitions
        self.priorities = priorities
        self.default_level = default_level(priorities)
        self.streams = topic_streams(self.stream, partitions, priorities)  # (stream,) if plain
        self.stopped = [StoppedView() for _ in self.streams]  # stopped IDs, per stream

    async def use_recorded_shape(self) -> None:
        """Take the partitions and levels recorded for this topic as its shape (for tools
        that operate on any topic, as the CLI does)."""
        client = self.client
        self.use_partitions(
            await recorded_partitions(client, self.stream),
            await recorded_priorities(client, self.stream),
        )

    # -- connection -----------------------------------------------------------------
    @property
    def deployment(self) -> Deployment:
        """The server's node(s): one node or a cluster (connects on first use)."""
        if self._deployment is None:
            self._deployment = self._connect()
        return self._deployment

    @property
    def connected(self) -> bool:
        return self._deployment is not None

    @property
    def client(self) -> aioredis.Redis:
        """The client of the topic's own stream (on a cluster: its slot's master)."""
        if self._client is None:
            self._client = self.deployment.client_for(self.stream)
        return self._client

    def client_for(self, stream: str) -> aioredis.Redis:
        """The client for one of the topic's streams (a partition's) and its keys."""
        client = self._clients.get(stream)
        if client is None:
            client = self._clients[stream] = self.deployment.client_for(stream)
        return client

    def node_of(self, stream: str) -> str:
        return self.deployment.node_of(stream)

    async def close(self) -> None:
        """Close the connections; the next use connects again."""
        deployment, self._deployment, self._client = self._deployment, None, None
        self._clients.clear()
        if deployment is not None:
            await deployment.aclose()

    # -- where a message goes -------------------------------------------------------
    def place_of(self, index: int) -> tuple[int, int | None]:
        """The partition and the level (None without priorities) of stream ``index``."""
        level, partition = divmod(index, self.partitions)
        return partition, level if self.priorities > 1 else None

    def partition(self, key: Key | None, level: int | None = None) -> int:
        """The stream of a message (its index in :attr:`streams`): its partition by its
        key's hash, else the next in turn; in its priority ``level`` (None: the default)."""
        if key is None and len(self.streams) == 1:
            return 0  # the usual case, without a call
        partition = choose_partition(key, self.partitions, self._next_turn)
        if level is None:
            level = self.default_level
        return level * self.partitions + partition

    def _next_turn(self) -> int:
        turn = self._turns
        self._turns = turn + 1
        return turn

    # -- the topic's shape ----------------------------------------------------------
    @property
    def shape_unchecked(self) -> bool:
        """No check of the recorded partition count on this connection yet."""
        return self.shape_checked_on is not self.deployment

    async def check_shape(self) -> None:
        """Check the topic's recorded partition count against this one (recording it the
        first time), as ``open()`` does; a queue that publishes without being opened does
        it at its first publish (once per connection): a plain queue's publish to a
        partitioned topic would go to a stream no consumer reads."""
        deployment = self.deployment
        await check_partition_count(self.client, self.stream, self.partitions, self.priorities)
        self.shape_checked_on = deployment

    async def check_shape_once(self) -> None:
        """:meth:`check_shape` for publishes without ``open()``: one at a time (200 first
        publishes at once make one check, not 200 on as many connections)."""
        async with self._lock():
            if self.shape_unchecked:
                await ride_through(self.deployment, self.check_shape)

    async def check_shape_again(self) -> None:
        """A publish found its stream missing (``NOMKSTREAM``): the topic is new, or was
        terminated and perhaps re-created with another partition count. Check its record
        again (ConfigError if this count no longer fits) before the stream is created.
        Publishes that found it missing at once share one check that began after they
        did."""
        found_missing = anyio.current_time()
        async with self._lock():
            if self._shape_checked_at <= found_missing:
                self._shape_checked_at = anyio.current_time()
                await ride_through(self.deployment, self.check_shape)

    def _lock(self) -> anyio.Lock:
        if self._shape_lock is None:  # made inside the event loop that uses it
            self._shape_lock = anyio.Lock()
        return self._shape_lock
