"""A worker of ``streamq run`` never outlives its supervisor.

The supervisor passes its pid. The worker asks the kernel for a SIGHUP when its parent
dies (Linux: ``PR_SET_PDEATHSIG``), then checks that the supervisor is still its parent
(it may have died while starting the worker, before the request); while it runs, a SIGHUP
or a check every second that finds another parent stops it gracefully.

SIGHUP, not SIGTERM: the kernel sends the signal each time the worker is handed to another
thread of its dying parent, and a second SIGTERM means "exit at once, no drain". A SIGHUP
is only acted on once the supervisor's pid is no longer the parent's, so the exit of one
of the supervisor's threads does not stop a worker whose supervisor still runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from types import FrameType

import anyio

from ..app import App

log = logging.getLogger("streamq.run.worker")
PARENT_CHECK_INTERVAL = 1.0
PARENT_DEATH_SIGNAL = signal.SIGHUP
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def bind_to_supervisor(supervisor: int) -> bool:
    """Be signalled when the parent dies; False if ``supervisor`` is already gone (not
    our parent any more). Until :func:`watch_supervisor` runs, that signal ends the
    process if the supervisor is gone: nothing has been read yet."""

    def exit_if_orphaned(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != supervisor:
            log.warning("the supervisor (pid %d) is gone: exiting", supervisor)
            raise SystemExit(0)

    signal.signal(PARENT_DEATH_SIGNAL, exit_if_orphaned)
    _request_parent_death_signal()  # before the check: a parent gone after it signals
    return os.getppid() == supervisor


def _request_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return  # elsewhere the check every second alone notices
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as e:  # no usable libc: the check every second remains
        log.debug("no parent-death signal (%s): checking the parent every second", e)


async def watch_supervisor(app: App, supervisor: int) -> None:
    """Stop ``app`` gracefully once ``supervisor`` is gone (SIGKILLed): no orphaned
    workers. Returns after asking it to stop."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_wait_for_signal, supervisor, tg.cancel_scope)
        await _poll(supervisor)
        tg.cancel_scope.cancel()
    log.warning("the supervisor (pid %d) is gone: stopping", supervisor)
    app.request_stop("supervisor gone")


async def _poll(supervisor: int) -> None:
    while True:  # a parent change wakes nothing: looked at every second
        if os.getppid() != supervisor:
            return
        await anyio.sleep(PARENT_CHECK_INTERVAL)


async def _wait_for_signal(supervisor: int, watch: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(PARENT_DEATH_SIGNAL) as signals:
        async for _ in signals:
            if os.getppid() != supervisor:  # not merely one of its threads that ended
                watch.cancel()
                return
