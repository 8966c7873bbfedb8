"""SIGINT/SIGTERM while a queue runs: a graceful stop, then, on a second signal, an exit
at once. Taken over only when ``run()`` is the process's main job, and given back after.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    stop_reason: str | None

    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None: ...


def owns_signals(handle_signals: bool | None) -> bool:
    """Whether run() should own SIGINT/SIGTERM: asked for, or by default when it is the
    process's main job (main thread, and not a test under pytest, whose run must not turn
    a supervisor's SIGTERM into a passing test)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if handle_signals is None:
        # the variable is inherited by a test's subprocesses, which are services of their own
        in_a_test = "PYTEST_CURRENT_TEST" in os.environ and "_pytest" in sys.modules
        return in_main_thread and not in_a_test
    return handle_signals and in_main_thread


def restore(handlers: Mapping[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


async def watch_stop_signals(
    consumer: Stoppable, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The first signal asks ``consumer`` to stop; a second one is raised again with the
    previous handlers back in place (the default ends the process at once). Started (with
    ``tg.start``) once the handlers are in place."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if consumer.stop_reason is None:
                    log.info("received %s: stopping (send it again to exit at once)", name)
                    consumer.request_stop("signal")
                    continue
                log.warning("received %s again: exiting at once", name)
                restore(previous)
                signal.raise_signal(signum)
    finally:
        restore(previous)
