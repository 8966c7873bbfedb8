"""A queue's states, and opening a queue whose server cannot be reached yet: ``run()`` and
``running()`` keep trying with backoff (readiness stays false meanwhile) until it works or
a stop is asked."""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from .errors import ServerUnavailableError

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

log = logging.getLogger("streamq.queue")

OPEN_RETRY_BACKOFF = 0.5
MAX_OPEN_RETRY_BACKOFF = 10.0


class State(enum.Enum):
    """Where a MessageQueue is: ``NEW`` -> ``OPEN`` (connected) -> ``RUNNING`` (consuming)
    -> ``OPEN`` again after a stop; ``CLOSED`` after ``aclose()``, which ``open()`` undoes."""

    NEW = "new"
    OPEN = "open"
    RUNNING = "running"
    CLOSED = "closed"


async def try_open(open_: Callable[[], Awaitable[None]]) -> bool:
    """Open now; False if the server cannot be reached yet (other errors raise)."""
    try:
        await open_()
    except ServerUnavailableError as e:
        log.warning("cannot reach the server yet; retrying with backoff: %s", e)
        return False
    return True


async def open_until_ready(
    prepare: Callable[[], Awaitable[None]], stop: anyio.Event, consumer: str
) -> bool:
    """Retry ``prepare`` with backoff until it works (True) or ``stop`` is set (False)."""
    backoff = OPEN_RETRY_BACKOFF
    while not stop.is_set():
        with anyio.move_on_after(backoff):
            await stop.wait()
        if stop.is_set():
            break
        try:
            await prepare()
        except ServerUnavailableError:
            backoff = min(backoff * 2, MAX_OPEN_RETRY_BACKOFF)
            continue
        log.info("server reached: consumer %s starts", consumer)
        return True
    return False


class ReportedOnce:
    """A task status reported by the first of those who may: for ``run()``, the engine as
    it begins to read, or ``run()`` itself (the server unreachable, or stopped before
    reading); for an App's queue, the queue's run, or its wrapper when the run failed."""

    def __init__(self, status: TaskStatus[None]) -> None:
        self._status, self.reported = status, False

    def started(self, value: None = None) -> None:
        if not self.reported:
            self.reported = True
            self._status.started(value)
