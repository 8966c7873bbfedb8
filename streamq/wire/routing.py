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
from collections.abc import Sequence
from typing import Any, cast

import anyio
import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.connection import AbstractConnection, ConnectionPool

from ..errors import ConfigError
from .following import FollowingRedis
from .slots import NOT_A_CLUSTER, Address, SlotTable, slot_of
from .translate import translate

log = logging.getLogger(__name__)


class RouterState:
    """What a router knows, without I/O: shared by the asyncio and the sync router."""

    def __init__(
        self, address: Address, cluster: bool | None, seeds: Sequence[Address] = ()
    ) -> None:
        """``seeds``: more nodes of the cluster to ask for the slot map (:mod:`.seeds`)."""
        if seeds and cluster is False:
            raise ConfigError("cluster=False, but the URL names several nodes (of a cluster)")
        self.address, self.seeds = address, list(seeds)
        self.cluster = cluster  # None until detected
        self.table = SlotTable()
        self.stale = cluster is not False
        self.scripts: dict[str, Any] = {}  # SHA -> text of the scripts registered (ASK)

    def note_reply(self, error: rx.ResponseError) -> None:
        """An error reply seen on a connection: maybe the slot table is out of date."""
        if not self.cluster:
            return
        if isinstance(error, rx.MovedError):
            self.table.move(error.slot_id, (error.host, error.port))
            self.stale = True
        elif isinstance(error, rx.TryAgainError | rx.ClusterDownError):
            self.stale = True  # (an ASK leaves the slot where it is until MOVED)

    def note_unreachable(self) -> None:
        """A node did not answer: after a failover another one serves its slots."""
        if self.cluster:
            self.stale = True

    def candidates(self, known: list[Address]) -> list[Address]:
        """Whom to ask for the slot table: the URL's node, every master seen, the URL's
        other nodes, then every node seen."""
        return list(dict.fromkeys([self.address, *self.table.masters(), *self.seeds, *known]))

    def detected(self, reply: Any, asked: Address) -> None:
        self.table.load(reply, asked)
        self.cluster, self.stale = True, False

    def failed(self, address: Address, error: BaseException, failures: list[str]) -> bool:
        """CLUSTER SLOTS failed at ``address``: True if that settles it (a single node),
        False to ask the next node; refused credentials raise (the same on every node)."""
        if isinstance(error, rx.AuthenticationError):
            raise error
        if isinstance(error, rx.ResponseError):
            why = classify_slots_error(error)
            if why is not None:
                self.single_node(why)
                return True
        failures.append(f"{address[0]}:{address[1]}: {error}")
        return False

    @staticmethod
    def nobody_answered(failures: list[str]) -> rx.ConnectionError:
        return rx.ConnectionError("no node answered CLUSTER SLOTS: " + "; ".join(failures))

    def single_node(self, why: str) -> None:
        if self.cluster:
            raise ConfigError(f"cluster=True but the server is not a cluster node: {why}")
        if self.seeds:
            raise ConfigError(f"the URL names several nodes, but they are no cluster: {why}")
        self.cluster, self.stale = False, False


def classify_slots_error(error: rx.ResponseError) -> str | None:
    """Why CLUSTER SLOTS failed if that means "single node", else None."""
    text = str(error)
    if NOT_A_CLUSTER in text or text.startswith("ERR unknown command"):
        return text
    if isinstance(error, rx.NoPermissionError) or text.startswith("NOPERM"):
        # (redis-py drops the "NOPERM" code from the text of its NoPermissionError)
        return f"{text} (cannot ask for the slot map: treated as a single node)"
    return None


def routed_connection_class(base: type[AbstractConnection], state: RouterState) -> type[Any]:
    """A subclass of the pool's connection class that tells ``state`` what it sees."""

    class RoutedConnection(base):  # type: ignore[misc]
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().read_response(*args, **kwargs)
            except rx.ResponseError as e:
                state.note_reply(e)
                raise
            except (rx.ConnectionError, rx.TimeoutError, OSError):
                state.note_unreachable()
                raise

        async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
            try:
                await super().connect_check_health(*args, **kwargs)
            except (rx.ConnectionError, rx.TimeoutError, OSError):
                state.note_unreachable()
                raise

    return RoutedConnection


class Deployment:
    """The pools of one deployment and the slot table that picks among them."""

    def __init__(
        self,
        seed: ConnectionPool,
        *,
        cluster: bool | None = None,
        owner: Any = None,
        seeds: Sequence[Address] = (),
    ) -> None:
        """``owner``: a client that owns ``seed`` and more (a Sentinel client and its
        connections to the sentinels), closed instead of the pool; given, the deployment
        is a Sentinel service's master (found again after a failover). ``seeds``: other
        nodes of the cluster than ``seed``'s."""
        kwargs = seed.connection_kwargs
        self._owner = owner
        address = (str(kwargs.get("host")), int(kwargs.get("port") or 0))
        self.state = RouterState(address, cluster, seeds)
        seed.connection_class = routed_connection_class(seed.connection_class, self.state)
        self.seed = seed
        self._pools: dict[Address, ConnectionPool] = {self.state.address: seed}
        self._lock: anyio.Lock | None = None

    @property
    def fails_over(self) -> bool:
        """Whether another node takes over when a master fails (a cluster, Sentinel):
        then one-shot operations wait for that instead of failing at once."""
        return bool(self.state.cluster) or self._owner is not None

    @property
    def cluster(self) -> bool | None:
        """True/False once known (after the first command), None before."""
        return self.state.cluster

    def client_for(self, key: str) -> aioredis.Redis:
        """A client whose commands go to the master serving ``key``'s slot."""
        client = self._client(SlotPool(self, slot_of(key)))
        client.stream = key
        return client

    def client_at(self, address: Address) -> aioredis.Redis:
        """A client for one node (commands that are about a node: SCAN, INFO)."""
        return self._client(NodePool(self, address))

    def node_of(self, key: str) -> str:
        """``host:port`` of the master serving ``key`` as last known (the URL's node on a
        single node; ``?`` while unknown)."""
        address: Any
        if self.state.cluster:
            address = self.state.table.owner(slot_of(key))
        elif self._owner is not None:  # Sentinel: the master it last found
            address = getattr(self.seed, "master_address", None)
        else:
            address = self.state.address
        return "?" if address is None else f"{address[0]}:{address[1]}"

    async def masters(self) -> list[Address]:
        """The address of every master (the URL's node alone when not a cluster)."""
        try:
            await self.pool_for_slot(0)  # detects and refreshes when needed
        except (rx.RedisError, OSError) as e:
            raise translate(e, "") from e
        return self.state.table.masters() if self.state.cluster else [self.state.address]

    async def pool_for_slot(self, slot: int) -> ConnectionPool:
        state = self.state
        if state.stale:
            await self._refresh()
        if not state.cluster:
            return self.seed
        owner = state.table.owner(slot)
        if owner is None:
            state.stale = True
            raise rx.ConnectionError(f"no master serves slot {slot} now (failover under way?)")
        return self.pool_at(owner)

    def pool_at(self, address: Address) -> ConnectionPool:
        pool = self._pools.get(address)
        if pool is None:
            kwargs = {**self.seed.connection_kwargs, "host": address[0], "port": address[1]}
            pool = type(self.seed)(
                connection_class=self.seed.connection_class,
                max_connections=self.seed.max_connections,
                **_pool_options(self.seed),
                **kwargs,
            )
            self._pools[address] = pool
        return pool

    def pool_of(self, connection: Any) -> ConnectionPool:
        """The pool a connection came from (to give it back)."""
        if not self.state.cluster:
            return self.seed
        return self._pools.get((connection.host, connection.port), self.seed)

    async def aclose(self) -> None:
        for pool in self._pools.values():
            if pool is not self.seed or self._owner is None:
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
            try:
                reply = await _cluster_slots(self.pool_at(address))
            except (rx.RedisError, OSError) as e:
                if self.state.failed(address, e, failures):
                    return
                continue
            self.state.detected(reply, address)
            return
        raise self.state.nobody_answered(failures)

    def _client(self, pool: Any) -> aioredis.Redis:
        return FollowingRedis(connection_pool=cast(ConnectionPool, pool))


def _pool_options(seed: ConnectionPool) -> dict[str, Any]:
    timeout = getattr(seed, "timeout", None)
    return {} if timeout is None else {"timeout": timeout}


async def _cluster_slots(pool: ConnectionPool) -> Any:
    connection = await pool.get_connection()
    try:
        await connection.send_command("CLUSTER", "SLOTS")
        return await connection.read_response()
    finally:
        await pool.release(connection)


class SlotPool:
    """A stand-in for a connection pool that gives connections to one slot's master."""

    def __init__(self, router: Deployment, slot: int) -> None:
        self.router, self.slot = router, slot

    @property
    def connection_kwargs(self) -> dict[str, Any]:
        return dict(self.router.seed.connection_kwargs)

    def get_encoder(self) -> Any:
        return self.router.seed.get_encoder()

    async def get_connection(self, *_args: Any, **_kwargs: Any) -> Any:
        pool = await self._pool()
        return await pool.get_connection()

    async def release(self, connection: Any) -> None:
        await self.router.pool_of(connection).release(connection)

    async def _pool(self) -> ConnectionPool:
        return await self.router.pool_for_slot(self.slot)

    def set_retry(self, _retry: Any) -> None:
        """streamq retries in its own loops; the routed pools keep no retry of their own."""

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
