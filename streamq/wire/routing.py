"""Sending each command to the node that serves its key: one node, or a Redis Cluster.

A :class:`Deployment` owns one connection pool per node. It learns whether the URL names a
cluster (``CLUSTER SLOTS``; a node without cluster mode says so) the first time a
connection is asked for, and which master serves each slot. Every streamq operation is on
the keys of one stream, which all share the stream's slot (:mod:`streamq.wire.keys`), so a
client *bound to a slot* is all the rest of streamq needs: :meth:`Deployment.client_for` gives
a plain ``redis.asyncio.Redis`` whose pool (:class:`SlotPool`) hands out connections to the
slot's current master. redis-py's commands, pipelines, transactions, scripts and pub/sub,
and streamq's hand-packed RESP (:mod:`streamq.wire.resp`), all run on it unchanged.

The connections report what they see (:class:`RoutedConnection`): a ``MOVED`` reply moves
the slot in the table at once and a full refresh follows before the next command; an
unreachable node, ``CLUSTERDOWN`` or ``TRYAGAIN`` (a failover, a multi-key command on a slot
half-migrated) refresh it too. The command itself fails as a transient error
(``ServerUnavailableError``) and is retried by the caller: the read loops with their
backoff, one-shot operations through :func:`streamq.wire.client.ride_through` (a plain
command follows one ``MOVED`` itself, :mod:`streamq.wire.following`). ``ASK`` (a key of a
slot being migrated is on the target already) is followed at once, by every command, the
hand-packed ones too (:mod:`streamq.wire.asking`): the table stays as it is.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import anyio
import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.connection import AbstractConnection, ConnectionPool

from . import revival
from .following import FollowingRedis
from .reading import read_reply
from .slots import Address, slot_of
from .topology import Nodes, RoutedPool, RouterState
from .translate import translate

log = logging.getLogger(__name__)


def routed_connection_class(base: type[AbstractConnection], state: RouterState) -> type[Any]:
    """A subclass of the pool's connection class that tells ``state`` what it sees."""

    class RoutedConnection(base):  # type: ignore[misc]
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().read_response(*args, **kwargs)
            except Exception as e:
                state.note_error(e)
                raise

        async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
            try:
                await super().connect_check_health(*args, **kwargs)
            except (rx.ConnectionError, rx.TimeoutError, OSError):
                state.note_unreachable()
                if not await revival.revive_async(*revival.address_of(self)):
                    raise
                await super().connect_check_health(*args, **kwargs)  # it runs again: once more

    return RoutedConnection


class Deployment(Nodes[ConnectionPool]):
    """The pools of one deployment and the slot table that picks among them."""

    _lock: anyio.Lock | None = None  # made on first use, in the event loop

    def _routed(self, base: type[Any]) -> type[Any]:
        return routed_connection_class(base, self.state)

    def client_for(self, key: str) -> aioredis.Redis:
        """A client whose commands go to the master serving ``key``'s slot."""
        client = self._client(SlotPool(self, slot_of(key)))
        client.stream = key
        return client

    def client_at(self, address: Address) -> aioredis.Redis:
        """A client for one node (commands that are about a node: SCAN, INFO)."""
        return self._client(NodePool(self, address))

    async def masters(self) -> list[Address]:
        """The address of every master (the URL's node alone when not a cluster)."""
        try:
            await self.pool_for_slot(0)  # detects and refreshes when needed
        except (rx.RedisError, OSError) as e:
            raise translate(e, "") from e
        return self.state.table.masters() if self.state.cluster else [self.state.address]

    async def pool_for_slot(self, slot: int) -> ConnectionPool:
        if self.state.stale:
            await self._refresh()
        return self._serving(slot)

    async def aclose(self) -> None:
        for pool in self._to_close():
            await pool.aclose()
        if self._owner is not None:
            await self._owner.aclose()

    async def _refresh(self) -> None:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self.state.stale:  # else another task refreshed while this one waited
                await self._load_slots()

    async def _load_slots(self) -> None:
        failures: list[str] = []
        for address in self.state.candidates(list(self._pools)):
            if self.state.answered(address, await _cluster_slots(self.pool_at(address)), failures):
                return
        raise self.state.nobody_answered(failures)

    def _client(self, pool: Any) -> aioredis.Redis:
        return FollowingRedis(connection_pool=cast(ConnectionPool, pool))


async def _cluster_slots(pool: ConnectionPool) -> Any:
    """The reply to ``CLUSTER SLOTS`` of ``pool``'s node, or the error raised instead."""
    try:
        connection = await pool.get_connection()
        try:
            await connection.send_command("CLUSTER", "SLOTS")
            return await read_reply(connection)
        finally:
            await pool.release(connection)
    except (rx.RedisError, OSError) as e:
        return e


class SlotPool(RoutedPool):
    """A stand-in for a connection pool that gives connections to one slot's master."""

    router: Deployment

    def __init__(self, router: Deployment, slot: int) -> None:
        self.router, self.slot = router, slot

    async def get_connection(self, *_args: Any, **_kwargs: Any) -> Any:
        pool = await self._pool()
        return await pool.get_connection()

    async def release(self, connection: Any) -> None:
        await self.router.pool_of(connection).release(connection)

    async def _pool(self) -> ConnectionPool:
        return await self.router.pool_for_slot(self.slot)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        """The router owns the pools: closing one client closes nothing."""

    async def aclose(self) -> None:
        """As :meth:`disconnect`."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} slot={self.slot} of {self.router.state.address}>"


class NodePool(SlotPool):
    """A :class:`SlotPool` for one node, whatever slots it serves."""

    def __init__(self, router: Deployment, address: Address) -> None:
        super().__init__(router, -1)
        self.address = address

    async def _pool(self) -> ConnectionPool:
        if self.router.state.stale:
            await self.router.pool_for_slot(0)
        return self.router.pool_at(self.address) if self.router.cluster else self.router.seed
