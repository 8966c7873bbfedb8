"""One worker process of ``streamq run`` (``python -m streamq.run.worker``).

It loads the target, names its consumers for its slot, runs the App (SIGTERM/SIGINT
drain it; a second signal ends the process at once), writes its status for the
supervisor every interval, and stops by itself if the supervisor disappears.

The supervisor passes its pid (``--supervisor``): the worker exits at once if that is no
longer its parent when it starts (the supervisor died while starting it) and stops once
it is gone later (``parent.py``), so no worker outlives its supervisor.

Exit codes: 0 after a graceful stop, 1 if a queue stopped on an error, 2 if the target
cannot be loaded or is misconfigured, the server's refusal of the URL's credentials
included (the supervisor then does not restart it in a loop).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ..app import App
from ..errors import CONFIGURATION_ERRORS, AuthenticationFailedError, ConfigError
from ..logs import LOG_FORMATS, configure_logging
from ..queue import MessageQueue
from .parent import bind_to_supervisor, watch_supervisor
from .status import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_OK,
    STATUS_INTERVAL,
    error_path,
    status_path,
    write_status,
)
from .target import assign_slot, load_target

log = logging.getLogger("streamq.run.worker")  # also when run as __main__
STATS_KEYS = ("received", "handled", "failed", "retried", "dead_lettered", "claimed", "acked")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m streamq.run.worker", allow_abbrev=False)
    parser.add_argument("target")
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--name", default=None, help="consumer names <name>-<slot>")
    parser.add_argument("--supervisor", type=int, default=None, help="the supervisor's pid")
    parser.add_argument("--app-dir", default=".")
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--status-interval", type=float, default=STATUS_INTERVAL)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    configure_logging(args.log_level, args.log_format)
    supervisor = os.getppid() if args.supervisor is None else args.supervisor
    if not bind_to_supervisor(supervisor):  # it died while starting us: we were handed on
        log.warning("worker %d: the supervisor (pid %d) is gone: exiting", args.slot, supervisor)
        return EXIT_OK
    try:
        app = load_target(args.target, args.app_dir)
        app.check_runnable()
    except ConfigError as e:  # every worker meets the same error: the first one says it
        log.log(logging.ERROR if args.slot == 0 else logging.DEBUG, "cannot start: %s", e)
        log.debug("why the target cannot start", exc_info=True)
        return EXIT_CONFIG
    assign_slot(app, args.slot, args.name)
    log.info(
        "worker %d (pid %d) runs %s as %s",
        args.slot, os.getpid(), args.target, ", ".join(mq.consumer for mq in app.queues),
    )  # fmt: skip
    reporter = StatusReporter(app, args.slot, args.run_dir, args.status_interval, supervisor)
    if args.run_dir is not None:  # every worker is refused alike: the supervisor says it once
        logging.getLogger("streamq.app").addFilter(_refused_credentials_unsaid)
    try:
        anyio.run(serve, app, reporter, supervisor)
    except Exception as e:
        error = _sole(e)
        if isinstance(error, AuthenticationFailedError) and args.run_dir is not None:
            with contextlib.suppress(OSError):
                error_path(args.run_dir, args.slot).write_text(str(error))
        return _stopped_on(args.slot, error)
    return EXIT_OK


def _refused_credentials_unsaid(record: logging.LogRecord) -> bool:
    """Keep the App's "stopped on an error" line for refused credentials out of a worker's
    log: the supervisor says it once for the run, not once per worker."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not any(isinstance(arg, AuthenticationFailedError) for arg in args)


def _stopped_on(slot: int, error: BaseException) -> int:
    """The exit code of a worker whose App raised ``error``, said in one line: a queue's
    configuration error (a consumer name another process holds, credentials the server
    refuses) was said by the App, and ends the run instead of being restarted."""
    if isinstance(error, CONFIGURATION_ERRORS):
        log.debug("worker %d stopped: %s", slot, error)
        return EXIT_CONFIG
    log.error("worker %d stopped on an error: %s", slot, error)
    return EXIT_ERROR


def _sole(error: BaseException) -> BaseException:
    """``error`` out of the task groups that wrapped it alone."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def serve(app: App, reporter: StatusReporter, parent: int) -> None:
    """Run the App with signals handled, beside the status reporter and parent watch."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reporter.run)
            tg.start_soon(watch_supervisor, app, parent)
            try:
                await app.run(handle_signals=True)
            finally:
                tg.cancel_scope.cancel()
    finally:  # after the periodic reports have ended: this one is the last word
        with anyio.CancelScope(shield=True):
            await reporter.report(final=True)


class StatusReporter:
    """Writes this worker's status file every ``interval`` seconds."""

    def __init__(
        self, app: App, slot: int, run_dir: Path | None, interval: float, supervisor: int
    ) -> None:
        self.app, self.slot, self.interval, self.supervisor = app, slot, interval, supervisor
        self.path = None if run_dir is None else status_path(run_dir, slot)

    @property
    def orphaned(self) -> bool:
        """The supervisor is gone: nobody will read or remove the status file."""
        return os.getppid() != self.supervisor

    async def run(self) -> None:
        while True:
            await self.report()
            await anyio.sleep(self.interval)

    async def report(self, *, final: bool = False) -> None:
        """Write the status; ``final``: not ready any more, counters kept, no round trip."""
        if self.path is None:
            return
        if final and self.orphaned:
            self._remove()
            return
        health: dict[str, Any] | None = None
        if not final:
            with anyio.move_on_after(max(self.interval, 1.0)):  # a hung server: not ready
                health = await self.app.health()
        queues = [
            {**self._identity(mq), "ready": False, "state": "stopping"}
            if health is None
            else health["queues"][index]
            for index, mq in enumerate(self.app.queues)
        ]
        for mq, queue in zip(self.app.queues, queues, strict=True):
            queue.update(url=mq.url, stats=mq.stats())
        ready = health is not None and bool(health["ready"])
        status = {"slot": self.slot, "pid": os.getpid(), "ready": ready, "queues": queues}
        try:
            await anyio.to_thread.run_sync(write_status, self.path, status)
        except OSError as e:  # the run directory went away: the supervisor is leaving
            log.debug("cannot write the status: %s", e)

    def _remove(self) -> None:
        """Take our status file away, and the run directory with the last one."""
        assert self.path is not None
        with contextlib.suppress(OSError):
            self.path.unlink()
            self.path.parent.rmdir()  # fails while another worker's file is there

    @staticmethod
    def _identity(mq: MessageQueue) -> dict[str, Any]:
        return {
            "stream": mq.stream, "group": mq.group, "consumer": mq.consumer,
            "streams": list(mq.streams),
        }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
