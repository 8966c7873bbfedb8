"""The synchronous twin of :mod:`streamq.wire.routing` (Publisher, metrics, Spark executors).

Same rules — a client bound to a key's slot, the slot table learnt on first use and
refreshed after ``MOVED``, ``CLUSTERDOWN``, ``TRYAGAIN`` or an unreachable node, ``ASK``
followed at once — with blocking I/O and a thread lock (a :class:`streamq.Publisher` is
shared by threads). Blocking code uses no redis-py pipelines: commands follow ASK here,
hand-packed ones in :func:`streamq.wire.resp.execute_sync`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis import exceptions as rx
from redis.client import Pipeline
from redis.connection import AbstractConnection, ConnectionPool

from . import revival
from .asking import answers, asked_node, is_ask, with_script
from .reading import read_reply_sync
from .slots import Address, slot_of
from .topology import Nodes, RoutedPool, RouterState
from .translate import translate_command


def routed_connection_class(base: type[AbstractConnection], state: RouterState) -> type[Any]:
    class RoutedConnection(base):  # type: ignore[misc]
        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().read_response(*args, **kwargs)
            except Exception as e:
                state.note_error(e)
                raise

        def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().connect_check_health(*args, **kwargs)
            except (rx.ConnectionError, rx.TimeoutError, OSError):
                state.note_unreachable()
                if not revival.revive(*revival.address_of(self)):
                    raise
                super().connect_check_health(*args, **kwargs)  # it runs again: once more

    return RoutedConnection


class FollowingRedis(redis.Redis):  # type: ignore[misc]
    """The blocking twin of :class:`streamq.wire.following.FollowingRedis` (commands)."""

    stream = ""  # as the asyncio client's

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            try:
                return self._asking_when_told(args, options)
            except rx.MovedError:  # not run; the slot table is corrected: once more
                return self._asking_when_told(args, options)
        except rx.NoScriptError:
            raise  # redis-py's Script loads the script when told so
        except (rx.RedisError, OSError) as e:
            raise translate_command(e, self.stream, args) from e

    def _asking_when_told(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        try:
            return super().execute_command(*args, **options)
        except rx.AskError as e:
            if not is_ask(e):
                raise
            router = self.connection_pool.router
            pipe = Pipeline(router.pool_at(asked_node(e)), self.response_callbacks, False, None)
            pipe.execute_command("ASKING")
            pipe.execute_command(*with_script(args, router.state.scripts), **options)
            (reply,) = answers(pipe.execute(raise_on_error=False))
        if isinstance(reply, Exception):
            raise reply
        return reply

    def register_script(self, script: Any) -> Any:
        """A script object, its text remembered for nodes that never loaded it."""
        registered = super().register_script(script)
        self.connection_pool.router.state.scripts[registered.sha] = registered.script
        return registered


class SyncDeployment(Nodes[ConnectionPool]):
    """The pools of one deployment, for blocking clients."""

    def __init__(
        self,
        seed: ConnectionPool,
        *,
        cluster: bool | None = None,
        owner: Any = None,
        seeds: Sequence[Address] = (),
    ) -> None:
        """As :class:`~streamq.wire.topology.Nodes`."""
        super().__init__(seed, cluster=cluster, owner=owner, seeds=seeds)
        self._lock = threading.Lock()  # a Publisher is shared by threads

    def _routed(self, base: type[Any]) -> type[Any]:
        return routed_connection_class(base, self.state)

    def client_for(self, key: str, *, owner: bool = False) -> redis.Redis:
        """A blocking client whose commands go to the master serving ``key``'s slot.

        ``owner``: closing the client closes this deployment (a client made for one job).
        """
        pool = SyncSlotPool(self, slot_of(key), owner=owner)
        client = FollowingRedis(connection_pool=cast(ConnectionPool, pool))
        client.auto_close_connection_pool = owner
        client.stream = key
        return client

    def pool_for_slot(self, slot: int) -> ConnectionPool:
        if self.state.stale:
            with self._lock:
                if self.state.stale:  # else another thread refreshed while this one waited
                    self._load_slots()
        return self._serving(slot)

    def close(self) -> None:
        for pool in self._to_close():
            pool.disconnect()
        if self._owner is not None:
            self._owner.close()

    def _load_slots(self) -> None:
        failures: list[str] = []
        for address in self.state.candidates(list(self._pools)):
            if self.state.answered(address, _cluster_slots(self.pool_at(address)), failures):
                return
        raise self.state.nobody_answered(failures)


def _cluster_slots(pool: ConnectionPool) -> Any:
    """The reply to ``CLUSTER SLOTS`` of ``pool``'s node, or the error raised instead."""
    try:
        connection = pool.get_connection()
        try:
            connection.send_command("CLUSTER", "SLOTS")
            return read_reply_sync(connection)
        finally:
            pool.release(connection)
    except (rx.RedisError, OSError) as e:
        return e


class SyncSlotPool(RoutedPool):
    """A stand-in for a blocking connection pool: connections to one slot's master."""

    router: SyncDeployment

    def __init__(self, router: SyncDeployment, slot: int, *, owner: bool = False) -> None:
        self.router, self.slot, self.owner = router, slot, owner

    def get_connection(self, *_args: Any, **_kwargs: Any) -> Any:
        return self.router.pool_for_slot(self.slot).get_connection()

    def release(self, connection: Any) -> None:
        self.router.pool_of(connection).release(connection)

    def disconnect(self, inuse_connections: bool = True) -> None:
        """The deployment owns the pools: closing a client closes them only if it owns
        the deployment."""
        if self.owner:
            self.router.close()

    def close(self) -> None:
        self.disconnect()
