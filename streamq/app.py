"""``streamq.App``: several queues (streams and groups) in one process, one lifecycle.

A service rarely consumes one stream: an App runs the handlers of all its queues together,
stops them together (a signal drains every queue within its grace), answers one readiness
probe and exports one metrics registry. ``streamq run module:app`` runs one in supervised
worker processes; ``app.running()`` runs one in the background of a web app's lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from ._opening import ReportedOnce
from ._router import Router
from ._stop_signals import owns_signals, watch_stop_signals
from .consume.context import inside_handler
from .consume.middlewares import HandlerMiddleware
from .errors import CONFIGURATION_ERRORS, ConfigError
from .publish.middlewares import PublishMiddleware
from .queue import MessageQueue

if TYPE_CHECKING:
    from .metrics import MetricsServer, QueueCollector
    from .publish.periodic import Periodic

log = logging.getLogger(__name__)


class App:
    """The queues of one service, run as one.

    ::

        app = App(orders, emails)            # or app.add(MessageQueue(...))
        async with app:                      # open every queue (groups created)
            await app.run()                  # until stop(), a signal, or every queue stopped
        async with app.running(): ...        # or in the background of a block (a lifespan)

    Parameters:
        queues: the MessageQueues to run; each keeps its own stream, group, consumer name,
            policies and handlers.
        name: a label for logs and health reports.
        routers: :class:`streamq.Router` objects whose handlers go to the App's one queue
            (with several queues, include each router into its queue instead).
        middlewares: handler and publish middlewares of every queue of the App, outside
            each queue's own (see :meth:`MessageQueue.add_middleware`).

    Raises ConfigError for a queue given twice, two queues with one consumer identity, or
    routers for an App of several queues.
    """

    def __init__(
        self,
        *queues: MessageQueue,
        name: str = "streamq",
        routers: Sequence[Router] = (),
        middlewares: Sequence[HandlerMiddleware | PublishMiddleware] = (),
    ) -> None:
        self.name = name
        self._queues: list[MessageQueue] = []
        self._middlewares = tuple(middlewares)
        self.stop_reason: str | None = None
        self.done = anyio.Event()
        self._stop_requested = anyio.Event()
        self._run_active = False
        self._starting: list[tuple[ReportedOnce, anyio.CancelScope]] = []  # this run's queues
        for mq in queues:
            self.add(mq)
        if routers and len(self._queues) != 1:
            raise ConfigError(
                f"App(routers=...) adds the routers to the App's one queue, but it has "
                f"{len(self._queues)}: include each router into its queue (mq.include_router)"
            )
        for router in routers:
            self._queues[0].include_router(router)

    @property
    def queues(self) -> tuple[MessageQueue, ...]:
        """The App's queues, in the order they were given or added."""
        return tuple(self._queues)

    @property
    def periodics(self) -> list[tuple[MessageQueue, Periodic]]:
        """The periodic publishers of every queue, each with its queue (they run while
        the App runs)."""
        return [(mq, periodic) for mq in self._queues for periodic in mq.periodics]

    def add(self, mq: MessageQueue) -> MessageQueue:
        """Add a queue (returned, so ``mq = app.add(MessageQueue(...))`` reads well)."""
        if not isinstance(mq, MessageQueue):
            raise ConfigError(f"App.add takes a MessageQueue, got {mq!r}")
        if self._run_active:
            raise ConfigError("cannot add a queue to a running App")
        identity = (mq.stream, mq.group, mq.consumer)
        if any((q.stream, q.group, q.consumer) == identity for q in self._queues):
            of = "a fan-out subscriber" if mq.group is None else f"group {mq.group!r}"
            raise ConfigError(
                f"two queues of this App would be consumer {mq.consumer!r} of {of} "
                f"on stream {mq.stream!r}: give them different names"
            )
        mq.registry.add_outermost(self._middlewares)
        self._queues.append(mq)
        return mq

    # -- lifecycle ------------------------------------------------------------------
    async def __aenter__(self) -> App:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open every queue (connect, check permissions, create groups); if one fails,
        those already opened are closed again and the error is raised."""
        opened: list[MessageQueue] = []
        try:
            for mq in self._queues:
                await mq.open()
                opened.append(mq)
        except BaseException:
            with anyio.CancelScope(shield=True):
                for mq in opened:
                    await mq.aclose()
            raise

    async def aclose(self) -> None:
        """Stop every queue that runs (all drain at once) and close them all."""
        async with anyio.create_task_group() as tg:
            for mq in self._queues:
                tg.start_soon(mq.aclose)

    def check_runnable(self) -> None:
        """Raise ConfigError if the App has no queue or a queue has no handler."""
        if not self._queues:
            raise ConfigError("this App has no queue: App(mq, ...) or app.add(mq)")
        idle = [_label(mq) for mq in self._queues if not len(mq.route_table)]
        if idle:
            raise ConfigError(f"no handlers registered on queue(s) {', '.join(idle)}")

    async def run(
        self,
        *,
        handle_signals: bool | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run every queue until :meth:`stop`, a signal, or each queue has stopped by
        itself (auto-stop); then set ``done``.

        ``handle_signals``: as :meth:`MessageQueue.run`: the first SIGINT/SIGTERM drains
        every queue, a second one exits at once. With ``tg.start(app.run)``, ``start``
        returns once every queue's consumer reads (or retries to reach its server).

        Raises ConfigError before starting anything if a queue has no handler; raises the
        first error a queue stopped on, after the others were stopped gracefully.
        """
        self.check_runnable()
        self._begin_run()
        errors: list[Exception] = []
        try:
            async with anyio.create_task_group() as outer:
                if owns_signals(handle_signals):
                    await outer.start(watch_stop_signals, self)
                all_started = anyio.Event()
                outer.start_soon(self._stop_all_when_requested, all_started)
                async with anyio.create_task_group() as runs:
                    for mq in self._queues:
                        if self._stop_requested.is_set():  # stopped while others started
                            break
                        await runs.start(self._run_queue, mq, errors)
                    all_started.set()
                    task_status.started()
                outer.cancel_scope.cancel()
        finally:
            self._run_active = False
            self.stop_reason = self.stop_reason or "stopped"
            self.done.set()
        if errors:
            raise errors[0]

    def _begin_run(self) -> None:
        if self._run_active:
            raise ConfigError("this App is already running")
        self._run_active = True
        self._starting = []
        if self.done.is_set():  # an App may run again: fresh events per run
            self.done = anyio.Event()
        if self._stop_requested.is_set():
            self._stop_requested = anyio.Event()
        self.stop_reason = None

    async def _run_queue(
        self, mq: MessageQueue, errors: list[Exception], *, task_status: TaskStatus[None]
    ) -> None:
        status = ReportedOnce(task_status)
        try:
            with anyio.CancelScope() as starting:
                self._starting.append((status, starting))
                await mq.run(handle_signals=False, task_status=status)
        except Exception as e:
            # a configuration error says all in its message; anything else, where it came from
            trace = None if isinstance(e, CONFIGURATION_ERRORS) else e
            log.error("queue %s stopped on an error: %s", _label(mq), e, exc_info=trace)
            errors.append(e)
            self.request_stop("error")
        finally:
            status.started()  # a queue that failed at start must not hold the others back

    async def _stop_all_when_requested(self, all_started: anyio.Event) -> None:
        await self._stop_requested.wait()
        for status, starting in self._starting:
            if not status.reported:  # still connecting (a server that does not answer):
                starting.cancel()  # it has read nothing, so there is nothing to drain
        await all_started.wait()  # a queue still starting has no consumer to stop yet
        await self._stop_queues()

    async def _stop_queues(self) -> None:
        async with anyio.create_task_group() as tg:  # all drain at once, not one after another
            for mq in self._queues:
                tg.start_soon(mq.stop)

    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None:
        """Ask every queue to stop (returns at once; :meth:`stop` also waits)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            log.info("app %s stopping: %s", self.name, reason)
        self._stop_requested.set()

    async def stop(self) -> None:
        """Stop every queue: stop reading, drain in-flight handlers within each grace."""
        self.request_stop("stopped")
        if self._run_active:
            if not inside_handler.get():  # a handler cannot wait for its own drain
                await self.done.wait()
            return
        await self._stop_queues()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[App]:
        """Run every queue in the background of the enclosed block (e.g. a FastAPI
        lifespan): returns once all are started; configuration errors raise here; leaving
        the block drains them all at once and closes the queues it opened."""
        self.check_runnable()
        async with AsyncExitStack() as stack:
            for mq in self._queues:
                await stack.enter_async_context(mq.running())
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop_queues()

    # -- observing ------------------------------------------------------------------
    async def health(self) -> dict[str, Any]:
        """One readiness report: ``ready`` when every queue is connected and consuming,
        and ``queues``, each queue's :meth:`MessageQueue.health` with its identity."""
        reports: list[dict[str, Any]] = [{} for _ in self._queues]

        async def check(index: int, mq: MessageQueue) -> None:
            identity = {"stream": mq.stream, "group": mq.group, "consumer": mq.consumer}
            reports[index] = {**identity, **await mq.health()}

        async with anyio.create_task_group() as tg:
            for index, mq in enumerate(self._queues):
                tg.start_soon(check, index, mq)
        ready = bool(reports) and all(report["ready"] for report in reports)
        return {"app": self.name, "ready": ready, "queues": reports}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each queue's :meth:`MessageQueue.stats`, by ``"<stream>/<group>"`` (a fan-out
        queue's: ``"<stream>/(fan-out <consumer>)"``)."""
        return {_label(mq): mq.stats() for mq in self._queues}

    def collector(self) -> QueueCollector:
        """One Prometheus collector for every queue (extra ``[metrics]``)."""
        from .metrics import QueueCollector  # extra [metrics]: prometheus_client

        return QueueCollector(*self._queues)

    def serve_metrics(
        self, *, port: int = 9108, addr: str = "127.0.0.1", registry: Any = None
    ) -> MetricsServer:
        """Serve every queue's metrics on one /metrics endpoint (see
        :func:`streamq.metrics.serve_metrics`)."""
        from .metrics import serve_metrics  # extra [metrics]: prometheus_client

        return serve_metrics(*self._queues, port=port, addr=addr, registry=registry)

    def __repr__(self) -> str:
        queues = ", ".join(_label(mq) for mq in self._queues)
        return f"App({self.name!r}: {queues})"


def _label(mq: MessageQueue) -> str:
    """``<stream>/<group>``; a fan-out queue, which has no group, by its consumer name."""
    if mq.group is None:
        return f"{mq.stream}/(fan-out {mq.consumer})"
    return f"{mq.stream}/{mq.group}"
