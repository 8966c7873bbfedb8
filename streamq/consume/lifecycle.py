"""The stop and error contract every mode's consumer keeps, and what MessageQueue sees of
a running consumer (:class:`Engine`).

A stop is asked once (the first reason wins: ``"stopped"``, ``"topic_terminated"``,
``"group_deleted"``, ``"stream_deleted"``, ``"error"``); ``auto`` says the consumer stopped
by itself. The first unexpected error is kept in ``error`` and ``run()``'s caller raises it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from ..errors import ConsumerError
from .failures import describe

log = logging.getLogger(__name__)


class Lifecycle:
    """Stop state of one consumer: ``stop_requested``, ``stop_reason``, ``auto_stopped``,
    ``error`` and ``reading`` (between start-up and shutdown of its read loops)."""

    def __init__(self, name: str) -> None:
        self.name = name  # for the records: "consumer c1", "fan-out subscriber", ...
        self.stop_requested = anyio.Event()
        self.stop_reason: str | None = None
        self.auto_stopped = False
        self.error: BaseException | None = None
        self.reading = False

    def stopping(self) -> bool:
        return self.stop_reason is not None

    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None:
        """Stop reading; ``run`` then drains and returns. The first reason wins."""
        if self.stop_reason is not None:
            return
        self.stop_reason, self.auto_stopped = reason, auto
        self.stop_requested.set()
        log.info("%s stopping: %s", self.name, reason)
        self._on_stop()

    def _on_stop(self) -> None:
        """What the consumer does at once when a stop is asked (wake its blocked reads)."""

    def fail(self, error: BaseException) -> None:
        """Stop with reason ``error``, keeping the first error for ``run()`` to raise."""
        if self.error is None:
            self.error = error
        self.request_stop("error", auto=True)

    def died(self, part: str, error: BaseException) -> None:
        """A part of the consumer ended without being asked to: stop with reason 'error'."""
        if self.stopping():
            return
        log.error("%s of %s died: %s", part, self.name, describe(error), exc_info=error)
        self.fail(
            error
            if isinstance(error, Exception)
            else ConsumerError(f"{part} died: {describe(error)}")
        )


class Engine(Protocol):
    """A running consumer of any mode, as MessageQueue sees it (a :class:`Lifecycle`)."""

    stop_requested: anyio.Event
    stop_reason: str | None
    auto_stopped: bool
    error: BaseException | None
    reading: bool

    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None: ...

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...

    def stats_report(self) -> dict[str, Any]: ...
