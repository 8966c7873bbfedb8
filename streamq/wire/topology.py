"""What a deployment knows and decides without I/O: shared by both routers.

The asyncio :class:`~streamq.wire.routing.Deployment` and the blocking
:class:`~streamq.wire.routing_sync.SyncDeployment` keep the same state (:class:`RouterState`:
whether it is a cluster, the slot table, whether that is stale) and make the same decisions
(:class:`Nodes`: which pool serves a slot, the options of a new node's pool, which pools to
close; :class:`RoutedPool`: what a slot-bound pool says about itself). Each router adds only
its I/O: asking ``CLUSTER SLOTS``, handing out and giving back connections, closing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from redis import exceptions as rx

from ..errors import ConfigError
from .slots import NOT_A_CLUSTER, Address, SlotTable, slot_of
from .tls import no_answer


class Pool(Protocol):
    """A connection pool: redis.asyncio's or redis-py's blocking one."""

    connection_class: Any

    @property
    def connection_kwargs(self) -> dict[str, Any]: ...


P = TypeVar("P", bound=Pool)


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

    def note_error(self, error: BaseException) -> None:
        """An error raised while reading a reply: maybe the slot table is out of date."""
        if isinstance(error, rx.ResponseError):
            self.note_reply(error)
        elif isinstance(error, rx.ConnectionError | rx.TimeoutError | OSError):
            self.note_unreachable()

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

    def answered(self, address: Address, reply: Any, failures: list[str]) -> bool:
        """``address`` answered ``reply`` to CLUSTER SLOTS (the error raised instead, if
        any): True if that settles it, False to ask the next node."""
        if isinstance(reply, BaseException):
            return self.failed(address, reply, failures)
        self.detected(reply, address)
        return True

    def detected(self, reply: Any, asked: Address) -> None:
        self.table.load(reply, asked)
        self.cluster, self.stale = True, False

    def failed(self, address: Address, error: BaseException, failures: list[str]) -> bool:
        """CLUSTER SLOTS failed at ``address``: True if that settles it (a single node),
        False to ask the next node; refused credentials raise (the same on every node)."""
        if isinstance(error, rx.AuthenticationError):
            raise error
        tls = no_answer(error)
        if tls is not None:  # rediss:// at plain ports: the same on every node
            raise tls
        if isinstance(error, rx.ResponseError) and DB_OUT_OF_RANGE in str(error):
            raise ConfigError(
                f"{shown(address)} has no database of the URL's index ({error}): "
                "use an index the server has (0 unless configured otherwise)"
            ) from error
        if isinstance(error, rx.ResponseError):
            why = classify_slots_error(error)
            if why is not None:
                self.single_node(why)
                return True
        failures.append(f"{shown(address)}: {error}")
        return False

    @staticmethod
    def nobody_answered(failures: list[str]) -> rx.ConnectionError:
        if len(failures) == 1:  # the URL's one node: say so, not how nodes are asked
            return rx.ConnectionError(f"cannot connect to {failures[0]}")
        return rx.ConnectionError("no node answered CLUSTER SLOTS: " + "; ".join(failures))

    def single_node(self, why: str) -> None:
        if self.cluster:
            raise ConfigError(f"cluster=True but the server is not a cluster node: {why}")
        if self.seeds:
            raise ConfigError(f"the URL names several nodes, but they are no cluster: {why}")
        self.cluster, self.stale = False, False


DB_OUT_OF_RANGE = "DB index is out of range"


def shown(address: Address) -> str:
    """``host:port``, or a unix socket's path (which has no port)."""
    host, port = address
    return f"{host}:{port}" if port else host


def classify_slots_error(error: rx.ResponseError) -> str | None:
    """Why CLUSTER SLOTS failed if that means "single node", else None."""
    text = str(error)
    if NOT_A_CLUSTER in text or text.startswith("ERR unknown command"):
        return text
    if isinstance(error, rx.NoPermissionError) or text.startswith("NOPERM"):
        # (redis-py drops the "NOPERM" code from the text of its NoPermissionError)
        return f"{text} (cannot ask for the slot map: treated as a single node)"
    return None


class Nodes(Generic[P]):
    """The pools of one deployment, one per node, and the slot table that picks among
    them: the part of a router without I/O."""

    def __init__(
        self,
        seed: P,
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
        # a unix socket's connections have a path instead of a host and a port
        address = (str(kwargs.get("host") or kwargs.get("path")), int(kwargs.get("port") or 0))
        self.state = RouterState(address, cluster, seeds)
        seed.connection_class = self._routed(seed.connection_class)
        self.seed = seed
        self._pools: dict[Address, P] = {address: seed}

    def _routed(self, base: type[Any]) -> type[Any]:
        """``base`` (a connection class) telling :attr:`state` what its connections see."""
        raise NotImplementedError

    @property
    def fails_over(self) -> bool:
        """Whether another node takes over when a master fails (a cluster, Sentinel):
        then one-shot operations wait for that instead of failing at once."""
        return bool(self.state.cluster) or self._owner is not None

    @property
    def cluster(self) -> bool | None:
        """True/False once known (after the first command), None before."""
        return self.state.cluster

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
        return "?" if address is None else shown(address)

    def pool_at(self, address: Address) -> P:
        """The pool of the node at ``address``, made like the seed's on first use."""
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = type(self.seed)(**pool_options(self.seed, address))
        return pool

    def pool_of(self, connection: Any) -> P:
        """The pool a connection came from (to give it back)."""
        if not self.state.cluster:
            return self.seed
        return self._pools.get((connection.host, connection.port), self.seed)

    def _serving(self, slot: int) -> P:
        """The pool of ``slot``'s master as last known (the seed's on a single node)."""
        state = self.state
        if not state.cluster:
            return self.seed
        owner = state.table.owner(slot)
        if owner is None:
            state.stale = True
            raise rx.ConnectionError(f"no master serves slot {slot} now (failover under way?)")
        return self.pool_at(owner)

    def _to_close(self) -> list[P]:
        """The pools this deployment closes (a Sentinel client closes its own)."""
        return [p for p in self._pools.values() if p is not self.seed or self._owner is None]


def pool_options(seed: Any, address: Address) -> dict[str, Any]:
    """The options of a pool for the node at ``address``: those of ``seed``'s pool."""
    timeout = getattr(seed, "timeout", None)  # a blocking pool's wait for a connection
    return {
        "connection_class": seed.connection_class,
        "max_connections": seed.max_connections,
        **({} if timeout is None else {"timeout": timeout}),
        **seed.connection_kwargs,
        "host": address[0],
        "port": address[1],
    }


class RoutedPool:
    """What a stand-in for a pool (connections to one slot's master) says of itself."""

    router: Nodes[Any]

    @property
    def connection_kwargs(self) -> dict[str, Any]:
        return dict(self.router.seed.connection_kwargs)

    def get_encoder(self) -> Any:
        return self.router.seed.get_encoder()

    def set_retry(self, _retry: Any) -> None:
        """streamq retries in its own loops; the routed pools keep no retry of their own."""
