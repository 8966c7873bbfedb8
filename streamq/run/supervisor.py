"""The supervisor of ``streamq run``: N worker processes kept running, drained together.

* Each worker slot runs ``python -m streamq.run.worker`` in a session of its own (a
  terminal's Ctrl-C reaches only the supervisor, which forwards one SIGTERM). It is
  given the supervisor's pid and stops by itself once the supervisor is gone, also if
  the supervisor is killed while starting it.
* A worker that exits on an error or a signal is restarted with exponential backoff
  (reset once it has run ``STABLE_AFTER`` seconds); one that stops by itself (exit 0:
  all its queues auto-stopped) is not; one that cannot load the target or is refused by
  the server (its credentials: exit 2) ends the run, or with ``--reload`` waits for the
  next change.
* The first SIGTERM/SIGINT drains every worker (each within its queues' grace), then the
  supervisor exits 0; a worker still running after ``shutdown_timeout`` is killed. A
  second signal kills the workers at once (their entries stay pending: the same slot
  recovers them on its next start) and exits ``128 + signal``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup

from .._backoff import Backoff
from ..errors import ConfigError
from . import reload
from .http import HttpEndpoints, WorkerView, health_routes, metrics_routes
from .status import EXIT_CONFIG, STATUS_INTERVAL, read_error, read_status, status_path

log = logging.getLogger(__name__)

RESTART_BACKOFF = 0.5
MAX_RESTART_BACKOFF = 30.0
STABLE_AFTER = 30.0
SHUTDOWN_MARGIN = 15.0  # beyond the queues' grace: flushing acks, closing connections
KILL_WAIT = 5.0


@dataclass
class RunOptions:
    """``streamq run``'s options (see ``streamq run --help``)."""

    target: str
    workers: int = 1
    name: str | None = None
    app_dir: str = "."
    reload: bool = False
    reload_dirs: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    metrics_port: int | None = None
    health_port: int | None = None
    log_level: str = "INFO"
    log_format: str = "text"
    shutdown_timeout: float = 10.0 + SHUTDOWN_MARGIN
    status_interval: float = STATUS_INTERVAL

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers!r}")
        if self.name is not None and not self.name.strip():
            raise ConfigError("--name must not be empty")


@dataclass
class Slot:
    index: int
    process: Process | None = None
    restarts: int = 0
    reloading: bool = False


class Supervisor:
    """Runs ``options.workers`` workers of ``options.target`` until signalled."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.slots = [Slot(i) for i in range(options.workers)]
        self.stopping = False
        self.exit_code = 0
        self.run_dir = Path(tempfile.mkdtemp(prefix="streamq-run-"))
        self._stop = anyio.Event()
        self._changed = anyio.Event()
        self._said_waiting: anyio.Event | None = None  # the change last said to be awaited
        self._endpoints: list[HttpEndpoints] = []
        self._collectors: list[Any] = []

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> int:
        """Supervise until every slot has ended (signals, or workers that stopped)."""
        if self.options.reload:
            reload.check_available()
        try:
            self._serve_http()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_signals, tg)
                if self.options.reload:
                    dirs = reload.absolute(self.options.reload_dirs or [self.options.app_dir])
                    tg.start_soon(reload.watch_code, dirs, self._reload, self._stop)
                async with anyio.create_task_group() as slots:
                    for slot in self.slots:
                        slots.start_soon(self._keep, slot)
                    task_status.started()
                tg.cancel_scope.cancel()
        finally:
            self._close()
        return self.exit_code

    def _command(self, slot: Slot) -> list[str]:
        o = self.options
        return [
            sys.executable, "-m", "streamq.run.worker", o.target,
            "--slot", str(slot.index), "--supervisor", str(os.getpid()), "--app-dir", o.app_dir,
            "--run-dir", str(self.run_dir), "--status-interval", str(o.status_interval),
            "--log-level", o.log_level, "--log-format", o.log_format,
            *(["--name", o.name] if o.name else []),
        ]  # fmt: skip

    async def _keep(self, slot: Slot) -> None:
        """Run the slot's worker again and again until the supervisor stops."""
        backoff = Backoff(RESTART_BACKOFF, MAX_RESTART_BACKOFF)
        while not self.stopping:
            started = anyio.current_time()
            slot.process = await anyio.open_process(
                self._command(slot), stdin=None, stdout=None, stderr=None,
                start_new_session=True,
            )  # fmt: skip
            pid = slot.process.pid
            code = await slot.process.wait()
            slot.process = None
            if self.stopping:
                break
            if slot.reloading:
                slot.reloading = False
                continue
            if not await self._after_exit(slot, pid, code):
                break
            if anyio.current_time() - started > STABLE_AFTER:
                backoff.reset()
            delay = backoff.next()
            log.warning(
                "worker %d (pid %d) exited with %s; restarting it in %.1fs",
                slot.index, pid, _describe_exit(code), delay,
            )  # fmt: skip
            slot.restarts += 1
            with anyio.move_on_after(delay):
                await self._stop.wait()

    async def _after_exit(self, slot: Slot, pid: int, code: int) -> bool:
        """Whether to restart a worker that exited by itself with ``code``."""
        if code == 0:
            log.info("worker %d (pid %d) stopped by itself; not restarted", slot.index, pid)
            return False
        if code != EXIT_CONFIG:
            return True
        if not self.options.reload:
            why = read_error(self.run_dir, slot.index)  # else the worker said it
            log.error(
                "worker %d cannot run %s%s: stopping",
                slot.index, self.options.target, f" ({why})" if why else "",
            )  # fmt: skip
            self.exit_code = EXIT_CONFIG
            self._begin_stop()
            return False
        changed = self._changed
        if self._said_waiting is not changed:  # once per change, not once per worker
            self._said_waiting = changed
            why = read_error(self.run_dir, slot.index)
            log.error(
                "the workers cannot run %s%s: waiting for a change",
                self.options.target, f" ({why})" if why else "",
            )  # fmt: skip
        await changed.wait()
        return not self.stopping

    # -- stopping and reloading ---------------------------------------------------------
    async def _watch_signals(self, tg: TaskGroup) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if not self.stopping:
                    log.info("received %s: draining %d workers (send it again to exit at once)",
                             name, len(self.slots))  # fmt: skip
                    self._begin_stop()
                    tg.start_soon(self._kill_after, self.options.shutdown_timeout)
                    continue
                log.warning("received %s again: killing the workers", name)
                self.exit_code = 128 + signum
                self._signal_all(signal.SIGKILL)

    def _begin_stop(self) -> None:
        self.stopping = True
        self._stop.set()
        self._changed.set()
        self._signal_all(signal.SIGTERM)

    async def _kill_after(self, delay: float) -> None:
        await anyio.sleep(delay)
        late = [s.index for s in self.slots if s.process is not None]
        if late:
            log.error("workers %s still running after %.0fs: killing them", late, delay)
            self.exit_code = self.exit_code or 1
            self._signal_all(signal.SIGKILL)

    def _signal_all(self, signum: signal.Signals) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    slot.process.send_signal(signum)

    def _reload(self, paths: list[str]) -> None:
        if self.stopping:
            return
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        log.info("changed: %s; restarting the workers", shown)
        for slot in self.slots:
            if slot.process is not None:
                slot.reloading = True
        self._signal_all(signal.SIGTERM)
        self._changed.set()
        self._changed = anyio.Event()

    # -- observing ------------------------------------------------------------------
    def workers(self) -> list[WorkerView]:
        views = []
        for slot in self.slots:
            process = slot.process
            alive = process is not None and process.returncode is None
            pid = process.pid if process is not None else None
            status = read_status(status_path(self.run_dir, slot.index))
            views.append(WorkerView(slot.index, pid, alive, slot.restarts, status))
        return views

    def statuses(self) -> list[dict[str, Any]]:
        found = (read_status(status_path(self.run_dir, s.index)) for s in self.slots)
        return [status for status in found if status is not None]

    def _serve_http(self) -> None:
        o = self.options
        routes: dict[int, dict[str, Any]] = {}
        if o.health_port is not None:
            health = health_routes(self.workers, lambda: self.stopping, o.status_interval)
            routes.setdefault(o.health_port, {}).update(health)
        if o.metrics_port is not None:
            metrics, collector = metrics_routes(self.statuses)
            self._collectors.append(collector)
            routes.setdefault(o.metrics_port, {}).update(metrics)
        for port, table in routes.items():
            endpoint = HttpEndpoints(o.host, port, table)
            self._endpoints.append(endpoint)
            log.info("serving %s on http://%s:%d", " ".join(sorted(table)), o.host, endpoint.port)

    def _close(self) -> None:
        for endpoint in self._endpoints:
            endpoint.close()
        for collector in self._collectors:
            collector.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
