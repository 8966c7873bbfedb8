"""Tracing as a handler middleware (``[otel]``): the same path users' middlewares take.

When a tracer provider is configured as a consumer starts, the consumer puts
:class:`TracingMiddleware` outermost on every route, before the App's, the queue's and the
router's middlewares: they and the handler run inside the span. Without one the routes are
the very objects registered: nothing is wrapped, nothing is paid per message.

The span covers one call of the handler chain (a retry in process is another call, so
another span). Decoding comes before it: an entry whose payload is invalid is
dead-lettered without a span, as it never reaches a handler.

Nothing tracing raises may change an outcome it did not cause: a span that cannot start
raises (the handler is not called; the entry's failure, as a handler's error would be); a
span that cannot record a failure or cannot end is reported, and what the handler did
stands.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import tracing
from .._log_summary import LogSummary
from ..signals import PartialFailure, Retry
from .failures import describe
from .middlewares import CallNext, with_middlewares
from .routes import Routes

log = logging.getLogger(__name__)


def traced(router: Routes, stream: str, group: str, consumer: str, summary: LogSummary) -> Routes:
    """``router`` with the tracing middleware outermost, or ``router`` itself when no
    tracer provider is configured (or without the extra)."""
    tracer = tracing.consumer_tracer(stream, group, consumer)
    if tracer is None:
        return router
    return with_middlewares(router, [TracingMiddleware(tracer, summary)])


class TracingMiddleware:
    """A CONSUMER span per handler call: one per message, one per batch (linked to each
    message's publisher span). See :mod:`streamq.tracing` for its attributes."""

    def __init__(self, tracer: tracing.ConsumerTracer, summary: LogSummary) -> None:
        self._tracer = tracer
        self._summary = summary

    async def __call__(self, msg: Any, call_next: CallNext) -> Any:
        tracer = self._tracer
        span = tracer.start_batch(msg) if isinstance(msg, list) else tracer.start(msg)
        try:
            with tracer.current(span):
                try:
                    result = await call_next(msg)
                except Exception as e:
                    if not isinstance(e, Retry):  # a Retry is no failure: it is asked for
                        self._record(span, e)
                    raise
                if isinstance(result, PartialFailure):
                    self._record(span, result)
                return result
        finally:
            self._end(span)

    def _record(self, span: Any, error: BaseException) -> None:
        try:
            self._tracer.failed(span, error, describe(error))
        except Exception as e:  # e.g. the SDK's str() of an error whose __str__ raises
            self._warn(
                "failures not recorded on their span",
                "could not record a failure on its trace span",
                e,
            )

    def _end(self, span: Any) -> None:
        try:
            self._tracer.end(span)
        except Exception as e:  # the handler's outcome stands
            self._warn("trace spans not ended", "could not end the trace span of a delivery", e)

    def _warn(self, kind: str, what: str, error: Exception) -> None:
        self._summary.log(log, kind, logging.WARNING, "%s: %s", what, describe(error))
