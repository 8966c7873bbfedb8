"""Workers: the loop of one worker, and the one pool of workers a partitioned topic's
partitions share.

A plain stream's consumer runs ``concurrency`` workers on its own :class:`WorkQueue`. The
consumers of a topic's partitions instead hand their entries, each with the partition that
processes it, to one :class:`SharedPool` of ``concurrency`` workers per process (idle
workers cost memory: partitions x concurrency of them would be mostly idle). Each partition
enters it through its own :class:`PoolEntrance`; the pool's queue closes once every
partition has closed its entrance (they stop together), and its workers then drain it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Protocol

import anyio
from anyio.abc import TaskStatus

from ..message import RawEntry
from .context import inside_handler
from .failures import cancelled_by_streamq
from .inflight import InFlight, Running, Workers
from .routes import Route
from .workqueue import FairWorkQueue, WorkQueue

if TYPE_CHECKING:
    from .levels import LevelQueue

log = logging.getLogger(__name__)

WORKER_TASK = "streamq worker"  # the name of every worker task

Died = Callable[[str, BaseException], None]


async def run_worker(
    slot: Callable[[anyio.CancelScope], AbstractContextManager[Running]],
    work: Callable[[Running], Awaitable[None]],
    died: Died,
) -> None:
    """``work`` in a worker slot until it returns (its queue closed and drained).

    One scope serves many entries (a scope per entry costs more than a no-op handler); a
    stop notice cancels the scope of the worker running that entry, and the worker goes on
    with a fresh one. ``died`` hears of anything else that ends the worker.
    """
    inside_handler.set(True)
    try:
        while True:
            with anyio.CancelScope() as scope, slot(scope) as running:
                await work(running)
                return
            log.info("a handler was cancelled because its entry was stopped")
    except BaseException as e:
        if not (isinstance(e, anyio.get_cancelled_exc_class()) and cancelled_by_streamq()):
            died("a worker", e)
        raise


class _Room(Protocol):
    @property
    def in_flight(self) -> InFlight: ...


class Partition(Protocol):
    """What the pool needs of a partition's consumer (:class:`~.consumer.Consumer`): its
    in-flight table, where a stop notice looks, and how it processes an entry."""

    @property
    def capacity(self) -> _Room: ...

    async def process(self, entry: RawEntry, route: Route | None, running: Running) -> None: ...


def _key(item: tuple[Partition, RawEntry, Route | None]) -> object:
    return item[1].fields.get(b"key")


class SharedPool:
    """``concurrency`` workers processing the entries of every partition of a topic."""

    def __init__(
        self, concurrency: int, partitions: int, max_per_key: int | None = None, priorities: int = 1
    ) -> None:
        self.queue: WorkQueue[tuple[Partition, RawEntry, Route | None]] = (
            WorkQueue() if max_per_key is None else FairWorkQueue(max_per_key, _key)
        )
        self.levels: LevelQueue[tuple[Partition, RawEntry, Route | None]] | None = None
        if priorities > 1:  # loaded on first use: only a topic with priorities has levels
            from .levels import LevelQueue

            self.queue = self.levels = LevelQueue(priorities, max_per_key, _key)
        self.workers = Workers()  # shared with each partition's in-flight table
        self._concurrency = concurrency
        self._open = partitions  # entrances not closed yet
        self._scope = anyio.CancelScope()
        self.done = anyio.Event()  # every worker has ended

    def entrance(self, partition: Partition, level: int = 0) -> PoolEntrance:
        """Where ``partition`` (a stream's consumer, of priority ``level``) puts entries."""
        return PoolEntrance(self, partition, level)

    def close_one(self) -> None:
        """One partition will put no more; the last one closes the queue."""
        self._open -= 1
        if self._open == 0:
            self.queue.close()

    async def run(self, died: Died, *, task_status: TaskStatus[None]) -> None:
        try:
            with self._scope:
                async with anyio.create_task_group() as workers:
                    for _ in range(self._concurrency):
                        workers.start_soon(
                            run_worker, self.workers.slot, self._work, died, name=WORKER_TASK
                        )
                    task_status.started()
        finally:
            self.done.set()

    async def _work(self, running: Running) -> None:
        queue = self.queue
        get, done = queue.get, None  # with max_per_key: a key's finished entry is counted out
        if isinstance(queue, FairWorkQueue):
            done = queue.done
        elif self.levels is not None and self.levels.caps_keys:
            done = self.levels.done
        while True:
            try:
                partition, entry, route = await get()
            except anyio.EndOfStream:
                return
            running.table = partition.capacity.in_flight  # where a stop notice looks
            await partition.process(entry, route, running)
            if done is not None:
                done(entry.fields.get(b"key"))

    async def wait_done(self) -> None:
        """Until every worker has ended; if cancelled (a partition's grace is over), the
        workers are cancelled and waited for."""
        try:
            await self.done.wait()
        except anyio.get_cancelled_exc_class():
            self._scope.cancel()
            with anyio.CancelScope(shield=True):
                await self.done.wait()
            raise


class PoolEntrance:
    """How one partition's consumer hands entries to the shared pool (it stands in for
    the consumer's own work queue: ``put_many`` and ``close``)."""

    def __init__(self, pool: SharedPool, partition: Partition, level: int = 0) -> None:
        self.pool = pool
        self._partition = partition
        self._closed = False
        levels = pool.levels
        self._put = pool.queue.put_many if levels is None else partial(levels.put_at, level)

    def put_many(self, ready: list[tuple[RawEntry, Route | None]]) -> None:
        if self._closed:  # shutting down: the caller leaves them pending
            raise anyio.ClosedResourceError
        partition = self._partition
        self._put([(partition, entry, route) for entry, route in ready])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool.close_one()
