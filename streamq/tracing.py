"""Tracing with OpenTelemetry (extra ``[otel]``): one trace from publish to handler.

* ``publish``/``publish_many`` inject the active span's context into the message's
  ``meta`` (W3C ``traceparent``/``tracestate``, through the globally configured
  propagator) when a span is active: a built-in publish middleware,
  :func:`inject_trace_context`, put innermost when the extra is installed (the sync
  ``Publisher``, which has no middlewares, calls :func:`with_trace_context` itself).
* The consumer continues it in a built-in handler middleware, outermost
  (:mod:`streamq.consume.traced`): one CONSUMER span ``process <stream>`` per message, child of
  the publisher's span; for a batch handler one span per batch, linked to each message's
  context. Attributes follow OpenTelemetry's messaging conventions: ``messaging.system``
  (``redis``), ``messaging.destination.name``, ``messaging.message.id``,
  ``messaging.consumer.group.name``, ``messaging.client.id``,
  ``messaging.destination.partition.id``, ``messaging.operation.type`` (``process``),
  ``messaging.batch.message_count``, plus ``streamq.message.type`` and
  ``streamq.delivery_count``. A failed delivery or a dead letter records the exception,
  ``error.type`` and an ERROR status.

Consumer spans are made when a tracer provider is configured (the global one, or one
given to :func:`set_tracer_provider`) as the consumer starts; without one the consumer's
routes are the registered handlers, unwrapped. Without the extra nothing is imported and
publishing runs no tracing middleware. With the extra the publish middleware runs even
without a tracer provider: a context extracted from an incoming request (the API alone,
no SDK) still travels on.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .message import Message

AVAILABLE = importlib.util.find_spec("opentelemetry") is not None
SYSTEM = "redis"

_provider: Any = None


def set_tracer_provider(provider: Any) -> None:
    """Use ``provider`` for streamq's consumer spans instead of the global one (``None``
    goes back to the global one). Applies to consumers started afterwards."""
    global _provider
    _provider = provider


def with_trace_context(meta: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``meta`` plus the active span's W3C context; ``meta`` itself when no span is active
    (or without the extra)."""
    if not AVAILABLE:
        return meta
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return meta
    carrier = dict(meta or {})
    propagate.inject(carrier)
    return carrier


async def inject_trace_context(
    message_type: str, data: Any, meta: Mapping[str, str] | None, call_next: Any
) -> Any:
    """The built-in publish middleware (with the extra): the message goes on with the
    active span's W3C context in its ``meta`` (see :func:`with_trace_context`).

    A queue puts it innermost, after the user's publish middlewares, so that the context
    sent is the one active at the send: a span a user's middleware opens around the
    publish is the consumer span's parent. ``publish_many`` without user middlewares
    calls it once with all the items as ``data`` (the context is the same for each): the
    items stay pipelined.
    """
    return await call_next(message_type, data, with_trace_context(meta))


def consumer_tracer(stream: str, group: str, consumer: str) -> ConsumerTracer | None:
    """The tracer of one consumer, or None (no extra, or no tracer provider configured)."""
    if not AVAILABLE:
        return None
    from opentelemetry import trace

    provider = _provider or trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return ConsumerTracer(provider.get_tracer("streamq", __version__), stream, group, consumer)


class ConsumerTracer:
    """Spans of one consumer's deliveries (built by :func:`consumer_tracer`)."""

    def __init__(self, tracer: Any, stream: str, group: str, consumer: str) -> None:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._tracer, self._trace, self._propagate = tracer, trace, propagate
        self._kind, self._status, self._error = SpanKind.CONSUMER, Status, StatusCode.ERROR
        self._name = f"process {stream}"
        self._common = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": stream,
            "messaging.consumer.group.name": group,
            "messaging.client.id": consumer,
        }

    def _attributes(self, msg: Message[Any]) -> dict[str, Any]:
        return {
            **self._common,
            "messaging.destination.partition.id": str(msg.partition),
            "streamq.message.type": msg.type,
        }

    def start(self, msg: Message[Any]) -> Any:
        """Start the span of one message's handling, child of its publisher's span if any
        (made current by :meth:`current`, ended by :meth:`end`)."""
        parent = self._propagate.extract(_strings(msg.meta))
        attributes = self._attributes(msg)
        attributes["messaging.message.id"] = msg.id
        attributes["streamq.delivery_count"] = msg.delivery_count
        return self._tracer.start_span(
            self._name, context=parent, kind=self._kind, attributes=attributes
        )

    def start_batch(self, msgs: list[Message[Any]]) -> Any:
        """Start one span for a batch, linked to each message's publisher span."""
        from opentelemetry.trace import Link

        links = []
        for msg in msgs:
            context = self._propagate.extract(_strings(msg.meta))
            span_context = self._trace.get_current_span(context).get_span_context()
            if span_context.is_valid:
                links.append(Link(span_context, {"messaging.message.id": msg.id}))
        attributes = self._attributes(msgs[0])
        attributes["messaging.batch.message_count"] = len(msgs)
        attributes["streamq.delivery_count"] = max(m.delivery_count for m in msgs)
        return self._tracer.start_span(
            self._name, kind=self._kind, links=links, attributes=attributes
        )

    def current(self, span: Any) -> AbstractContextManager[Any]:
        """``span`` as the current span (what the handler sees) while in the block."""
        # failures are recorded by the caller (error.type, one event), the span ended by it
        return self._trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    @staticmethod
    def end(span: Any) -> None:
        span.end()

    def failed(self, span: Any, error: BaseException, reason: str) -> None:
        """Record a failed handler call (its exception, ``error.type``, ERROR) on ``span``."""
        if not span.is_recording():
            return
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(self._status(self._error, reason))


def _strings(meta: dict[str, str]) -> dict[str, str]:
    """The string values of a message's ``meta`` (decoding has checked they all are: this
    keeps a hand-built Message from reaching the propagator with others)."""
    return {key: value for key, value in meta.items() if type(value) is str}
