"""Per-type batching for batch handlers.

A type's batch is flushed when it holds ``size`` entries or ``timeout`` after its first
entry. Batches of one type run one after another (order within a type is kept), except
that an entry which has waited ``max_wait`` since it was read is flushed at once, beside a
batch that is still running. On close every partial batch is flushed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from itertools import repeat

import anyio
from anyio.abc import TaskGroup

from ..config import BatchConfig
from ..message import RawEntry
from .context import inside_handler
from .routes import Route

log = logging.getLogger(__name__)

FlushBatch = Callable[[Route, list[RawEntry]], Awaitable[None]]


@dataclass
class _TypeState:
    route: Route
    size: int
    timeout: float
    max_wait: float
    entries: list[RawEntry] = field(default_factory=list)
    read_at: list[float] = field(default_factory=list)  # when each entry was read
    first_at: float = 0.0  # when the oldest waiting entry was read
    running: int = 0
    nonempty: anyio.Event = field(default_factory=anyio.Event)
    full: anyio.Event = field(default_factory=anyio.Event)
    idle: anyio.Event = field(default_factory=anyio.Event)

    def take(self) -> list[RawEntry]:
        batch, self.entries = self.entries[: self.size], self.entries[self.size :]
        del self.read_at[: len(batch)]
        if self.entries:
            self.first_at = self.read_at[0]
        if len(self.entries) < self.size:
            self.full = anyio.Event()
        return batch


class Batcher:
    """Collects entries per type and hands full (or timed-out) batches to ``flush``."""

    def __init__(
        self, defaults: BatchConfig, flush: FlushBatch, limiter: AbstractAsyncContextManager[None]
    ) -> None:
        self._defaults = defaults
        self._flush = flush
        self._limiter = limiter
        self._states: dict[str, _TypeState] = {}
        self._tg: TaskGroup | None = None
        self._closing = False

    def bind(self, task_group: TaskGroup) -> None:
        """Batches run in ``task_group`` (the consumer's work group)."""
        self._tg = task_group

    def add(self, route: Route, entries: list[RawEntry], read_at: float) -> None:
        """Queue ``entries`` (all of ``route``'s type, read at ``read_at``) for batching."""
        state = self._states.get(route.type_name)
        if state is None:
            state = self._new_state(route)
        if not state.entries:
            state.first_at = read_at
            state.nonempty.set()
        state.entries.extend(entries)
        state.read_at.extend(repeat(read_at, len(entries)))
        if len(state.entries) >= state.size:
            state.full.set()

    def _new_state(self, route: Route) -> _TypeState:
        settings, defaults = route.batch_settings, self._defaults
        state = _TypeState(
            route=route,
            size=(settings and settings.size) or defaults.size,
            timeout=(settings and settings.timeout) or defaults.timeout,
            max_wait=(settings and settings.max_wait) or defaults.max_wait,
        )
        state.max_wait = max(state.max_wait, state.timeout)
        state.idle.set()
        self._states[route.type_name] = state
        assert self._tg is not None, "Batcher.bind() must be called before add()"
        self._tg.start_soon(self._type_loop, state, name=f"batcher:{route.type_name}")
        return state

    def close(self) -> None:
        """Flush every partial batch now; the loops end when their buffers are empty."""
        self._closing = True
        for state in self._states.values():
            state.full.set()
            state.nonempty.set()

    async def _type_loop(self, state: _TypeState) -> None:
        while True:
            if not state.entries:
                if self._closing:
                    return
                state.nonempty = anyio.Event()
                await state.nonempty.wait()
                continue
            await self._wait_until_due(state)
            if state.running and not self._closing:
                # keep batches in order, unless the oldest entry would wait past max_wait
                with anyio.move_on_after(state.first_at + state.max_wait - anyio.current_time()):
                    await state.idle.wait()
            batch = state.take()
            state.running += 1
            state.idle = anyio.Event()
            assert self._tg is not None
            self._tg.start_soon(self._run, state, batch)

    async def _wait_until_due(self, state: _TypeState) -> None:
        if self._closing or len(state.entries) >= state.size:
            return  # (waiting on a set event would still cost a trip round the event loop)
        with anyio.move_on_after(state.first_at + state.timeout - anyio.current_time()):
            await state.full.wait()

    async def _run(self, state: _TypeState, batch: list[RawEntry]) -> None:
        inside_handler.set(True)
        try:
            async with self._limiter:
                await self._flush(state.route, batch)
        finally:
            state.running -= 1
            if state.running == 0:
                state.idle.set()
