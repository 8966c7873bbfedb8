"""Tracing with OpenTelemetry (extra ``[otel]``): one trace from publish to handler.

* ``publish``/``publish_many`` (and the sync ``Publisher``) inject the active span's
  context into the message's ``meta`` (W3C ``traceparent``/``tracestate``, through the
  globally configured propagator) when a span is active.
* The consumer continues it: one CONSUMER span ``process <stream>`` per message, child of
  the publisher's span; for a batch handler one span per batch, linked to each message's
  context. Attributes follow OpenTelemetry's messaging conventions: ``messaging.system``
  (``redis``), ``messaging.destination.name``, ``messaging.message.id``,
  ``messaging.consumer.group.name``, ``messaging.client.id``,
  ``messaging.destination.partition.id``, ``messaging.operation.type`` (``process``),
  ``messaging.batch.message_count``, plus ``streamq.message.type`` and
  ``streamq.delivery_count``. A failed delivery or a dead letter records the exception,
  ``error.type`` and an ERROR status.

Consumer spans are made when a tracer provider is configured (the global one, or one
given to :func:`set_tracer_provider`) as the consumer starts. Without the extra nothing
is imported: publishing checks one module flag.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .message import RawEntry

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


def consumer_tracer(stream: str, group: str, consumer: str) -> ConsumerTracer | None:
    """The tracer of one consumer, or None (no extra, or no tracer provider configured)."""
    if not AVAILABLE:
        return None
    from opentelemetry import trace

    provider = _provider or trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return ConsumerTracer(provider.get_tracer("streamq", __version__), stream, group, consumer)


def _meta_of(entry: RawEntry) -> dict[str, str]:
    raw = entry.fields.get(b"meta")
    if not raw:
        return {}
    try:
        meta = json.loads(raw)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


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

    def _attributes(self, entry: RawEntry, type_name: str) -> dict[str, Any]:
        return {
            **self._common,
            "messaging.destination.partition.id": str(getattr(entry, "partition", 0)),
            "streamq.message.type": type_name,
        }

    @contextmanager
    def process(self, entry: RawEntry, type_name: str) -> Iterator[None]:
        """The span of one entry's handling, child of its publisher's span if any."""
        parent = self._propagate.extract(_meta_of(entry))
        attributes = self._attributes(entry, type_name)
        attributes["messaging.message.id"] = entry.id
        attributes["streamq.delivery_count"] = entry.delivery_count
        with self._tracer.start_as_current_span(
            self._name, context=parent, kind=self._kind, attributes=attributes
        ):
            yield

    @contextmanager
    def process_batch(self, entries: list[RawEntry], type_name: str) -> Iterator[None]:
        """One span for a batch, linked to each message's publisher span."""
        from opentelemetry.trace import Link

        links = []
        for entry in entries:
            context = self._propagate.extract(_meta_of(entry))
            span_context = self._trace.get_current_span(context).get_span_context()
            if span_context.is_valid:
                links.append(Link(span_context, {"messaging.message.id": entry.id}))
        attributes = self._attributes(entries[0], type_name)
        attributes["messaging.batch.message_count"] = len(entries)
        attributes["streamq.delivery_count"] = max(e.delivery_count for e in entries)
        with self._tracer.start_as_current_span(
            self._name, kind=self._kind, links=links, attributes=attributes
        ):
            yield

    def failed(self, error: BaseException | None, reason: str) -> None:
        """Record a failed delivery (or a dead letter) on the current span."""
        span = self._trace.get_current_span()
        if not span.is_recording():
            return
        if error is not None:
            span.record_exception(error)
        span.set_attribute(
            "error.type", type(error).__qualname__ if error is not None else "dead_letter"
        )
        span.set_status(self._status(self._error, reason))
