"""What a delivery looks like from outside: its log context and, with ``[otel]``, its span.

Kept apart from dispatch so that handling decides outcomes and this module only reports
them (see :mod:`streamq.logs` and :mod:`streamq.tracing`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from .. import tracing
from ..logs import ENTRY

if TYPE_CHECKING:
    from ..message import RawEntry


class Observer:
    """Log context and trace spans of one consumer's deliveries."""

    def __init__(self, stream: str, group: str, consumer: str) -> None:
        self.tracer = tracing.consumer_tracer(stream, group, consumer)  # None: no tracing

    async def single(self, work: Awaitable[None], entry: RawEntry, type_name: str) -> None:
        """Await ``work``, the handling of ``entry``, in its log context and span."""
        token = ENTRY.set((entry.id, type_name, entry.delivery_count))
        try:
            if self.tracer is None:
                await work
            else:
                with self.tracer.process(entry, type_name):
                    await work
        finally:
            ENTRY.reset(token)

    async def batch(self, work: Awaitable[None], entries: list[RawEntry], type_name: str) -> None:
        """Await ``work``, the handling of a batch, in its log context and span."""
        delivery = max(entry.delivery_count for entry in entries)
        token = ENTRY.set(([e.id for e in entries], type_name, delivery))
        try:
            if self.tracer is None:
                await work
            else:
                with self.tracer.process_batch(entries, type_name):
                    await work
        finally:
            ENTRY.reset(token)

    def failed(self, error: BaseException, reason: str) -> None:
        """A delivery failed (it stays pending): recorded on the span."""
        if self.tracer is not None:
            self.tracer.failed(error, reason)

    def dead_lettered(self, reason: str, error: BaseException | None) -> None:
        """An entry goes to the dead letters (logged by them): recorded on the span."""
        if self.tracer is not None:
            self.tracer.failed(error, reason)
