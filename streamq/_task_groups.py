"""A task group around the block of an async context manager, whose own error comes out as
itself.

anyio wraps every error leaving a task group in an ``ExceptionGroup``, the error of the
``async with`` body included; a user's ``async with mq.running(): raise ValueError`` should
be caught by ``except ValueError`` all the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup


@asynccontextmanager
async def task_group_around_block() -> AsyncIterator[TaskGroup]:
    """A task group for background tasks while a block runs: when the block raised and no
    background task did, the block's error is raised as itself (its own traceback and
    chain), not wrapped in an ``ExceptionGroup``. Several errors stay grouped."""
    own: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            try:
                yield tg
            except BaseException as e:
                own = e
                raise
    except BaseExceptionGroup as group:
        if own is None or len(group.exceptions) != 1 or group.exceptions[0] is not own:
            raise
    else:
        return
    # raised outside the `except` clause: the group does not become the error's context
    raise own
