"""What a delivery looks like from outside: its log context and, with ``[otel]``, its span.

Kept apart from dispatch so that handling decides outcomes and this module only reports
them (see :mod:`streamq.logs` and :mod:`streamq.tracing`).

Tracing is optional, and nothing it raises may change an entry's outcome: a span that
cannot start raises before the handling begins (the consumer makes that the entry's
failure, counted like a handler's); once the handling has begun, a span that cannot record
a failure or cannot end is reported and the outcome stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .. import tracing
from ..log_summary import LogSummary
from ..logs import ENTRY
from .failures import describe

if TYPE_CHECKING:
    from ..message import RawEntry

log = logging.getLogger(__name__)

Work = Coroutine[Any, Any, None]


class Observer:
    """Log context and trace spans of one consumer's deliveries."""

    def __init__(
        self, stream: str, group: str, consumer: str, summary: LogSummary | None = None
    ) -> None:
        self.tracer = tracing.consumer_tracer(stream, group, consumer)  # None: no tracing
        self._summary = summary or LogSummary()

    async def single(self, work: Work, entry: RawEntry, type_name: str) -> None:
        """Await ``work``, the handling of ``entry``, in its log context and span; raises
        what starting the span raised, before ``work`` begins."""
        token = ENTRY.set((entry.id, type_name, entry.delivery_count))
        try:
            if self.tracer is None:
                await work
            else:
                await self._traced(work, self.tracer.start, entry, type_name)
        finally:
            ENTRY.reset(token)

    async def batch(self, work: Work, entries: list[RawEntry], type_name: str) -> None:
        """Await ``work``, the handling of a batch, in its log context and span (as
        :meth:`single`)."""
        delivery = max(entry.delivery_count for entry in entries)
        token = ENTRY.set(([e.id for e in entries], type_name, delivery))
        try:
            if self.tracer is None:
                await work
            else:
                await self._traced(work, self.tracer.start_batch, entries, type_name)
        finally:
            ENTRY.reset(token)

    async def _traced(self, work: Work, start: Callable[..., Any], *args: Any) -> None:
        assert self.tracer is not None
        try:
            span = start(*args)
        except BaseException:
            work.close()  # never begun: the entries' failure is recorded by the caller
            raise
        try:
            with self.tracer.current(span):
                await work
        finally:
            self._end(span)

    def _end(self, span: Any) -> None:
        assert self.tracer is not None
        try:
            self.tracer.end(span)
        except Exception as e:  # the outcome is recorded already: it stands
            self._warn("trace spans not ended", "could not end the trace span of a delivery", e)

    def failed(self, error: BaseException, reason: str) -> None:
        """A delivery failed (it stays pending): recorded on the span."""
        if self.tracer is not None:
            self._record(error, reason)

    def dead_lettered(self, reason: str, error: BaseException | None) -> None:
        """An entry goes to the dead letters (logged by them): recorded on the span."""
        if self.tracer is not None:
            self._record(error, reason)

    def _record(self, error: BaseException | None, reason: str) -> None:
        assert self.tracer is not None
        try:
            self.tracer.failed(error, reason)
        except Exception as e:  # e.g. the SDK's str() of an error whose __str__ raises
            self._warn(
                "failures not recorded on their span",
                "could not record a failure on its trace span",
                e,
            )

    def _warn(self, kind: str, what: str, error: Exception) -> None:
        self._summary.log(log, kind, logging.WARNING, "%s: %s", what, describe(error))
