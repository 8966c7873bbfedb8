"""Waiting on a condition with a deadline, never for a fixed time: the test fails saying
what it waited for when the deadline passes."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from streamq import MessageQueue


async def wait_for(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0, what: str = ""
) -> None:
    """Poll ``predicate`` until true; fail the test with ``what`` after ``timeout``."""
    with anyio.move_on_after(timeout):
        while True:
            result = predicate()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await anyio.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """:func:`wait_for` for tests without an event loop (processes, threads)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")


async def run_until(mq: MessageQueue, done: Any, timeout: float = 10.0) -> None:
    """Run ``mq`` until ``done()`` is true, then stop it and wait for ``mq.done``."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await wait_for(done, timeout)
        await mq.stop()
    assert mq.done.is_set()
