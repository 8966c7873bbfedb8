"""Opening a queue whose server cannot be reached yet: ``run()`` and ``running()`` keep
trying with backoff (readiness stays false meanwhile) until it works or a stop is asked."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from .errors import ServerUnavailableError

log = logging.getLogger("streamq.queue")

OPEN_RETRY_BACKOFF = 0.5
MAX_OPEN_RETRY_BACKOFF = 10.0


async def try_open(open_: Callable[[], Awaitable[None]]) -> bool:
    """Open now; False if the server cannot be reached yet (other errors raise)."""
    try:
        await open_()
    except ServerUnavailableError as e:
        log.warning("cannot reach the server yet; retrying with backoff: %s", e)
        return False
    return True


async def open_until_ready(prepare: Callable[[], Awaitable[None]], stop: anyio.Event) -> bool:
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
        return True
    return False
