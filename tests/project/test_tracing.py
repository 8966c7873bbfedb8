"""Issue 15, tracing with the [otel] extra, checked with the SDK's in-memory exporter:
publish -> handle is one trace, batches link to each message, failures are recorded, and
nothing is imported without the extra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from streamq import Message, Publisher, Reject, RetryPolicy, StartFrom, tracing
from tests.helpers.clients import sync_client
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

otel = pytest.importorskip("opentelemetry.sdk.trace", reason="the tracing tests need the SDK")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    yield exporter
    tracing.set_tracer_provider(None)
    provider.shutdown()


def caller(exporter: InMemorySpanExporter) -> Any:
    """A tracer for the test's own spans (the publishing service's request)."""
    return tracing._provider.get_tracer("tests")


def consumer_spans(exporter: InMemorySpanExporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]


async def run_until(mq: Any, predicate: Any, what: str) -> None:
    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        await wait_for(predicate, what=what)
        await mq.stop()


async def test_publish_to_handle_is_one_trace(
    make_queue: QueueFactory, stream: str, exporter: InMemorySpanExporter
) -> None:
    mq = make_queue()
    metas: list[dict[str, str]] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        metas.append(msg.meta)
        metas.append(
            {"current": format(trace.get_current_span().get_span_context().trace_id, "032x")}
        )

    with caller(exporter).start_as_current_span("POST /jobs") as request:
        entry_id = await mq.publish("job", 1, meta={"k": "v"})
    await run_until(mq, lambda: len(metas) == 2, "the job handled")

    (span,) = consumer_spans(exporter)
    context = request.get_span_context()
    assert span.context.trace_id == context.trace_id, "the consumer span is in the request's trace"
    assert span.parent is not None and span.parent.span_id == context.span_id
    assert span.name == f"process {stream}"
    assert dict(span.attributes) == {
        "messaging.system": "redis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": stream,
        "messaging.consumer.group.name": "g",
        "messaging.client.id": "c1",
        "messaging.destination.partition.id": "0",
        "messaging.message.id": entry_id,
        "streamq.message.type": "job",
        "streamq.delivery_count": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert metas[0]["k"] == "v" and metas[0]["traceparent"].startswith("00-")
    assert metas[1]["current"] == format(context.trace_id, "032x"), "the handler runs in the span"


async def test_without_an_active_span_nothing_is_injected(
    make_queue: QueueFactory, exporter: InMemorySpanExporter
) -> None:
    mq = make_queue()
    metas: list[dict[str, str]] = []
    mq.handler("job")(lambda msg: metas.append(msg.meta))
    await mq.publish("job", 1)
    await run_until(mq, lambda: len(metas) == 1, "the job handled")
    assert metas == [{}]
    (span,) = consumer_spans(exporter)
    assert span.parent is None, "a new trace starts at the consumer"


async def test_failures_are_recorded_on_the_span(
    make_queue: QueueFactory, exporter: InMemorySpanExporter
) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=1))

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        if msg.data == 1:
            raise ValueError("no such customer")
        raise Reject("refund window closed")

    await mq.publish_many("job", [1, 2])
    await run_until(mq, lambda: mq.stats()["dead_lettered"] == 2, "both dead-lettered")
    failed, rejected = sorted(
        consumer_spans(exporter), key=lambda s: s.attributes["messaging.message.id"]
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert "no such customer" in (failed.status.description or "")
    assert failed.attributes["error.type"] == "ValueError"
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.events[0].attributes["exception.message"] == "no such customer"
    assert rejected.status.status_code is StatusCode.ERROR
    assert rejected.attributes["error.type"] == "Reject"


async def test_a_batch_is_one_span_linked_to_each_message(
    make_queue: QueueFactory, stream: str, exporter: InMemorySpanExporter
) -> None:
    mq = make_queue()
    seen: list[int] = []

    @mq.batch_handler("job", size=2, timeout=1.0)
    async def jobs(msgs: list[Message[int]]) -> None:
        seen.extend(m.data for m in msgs)

    contexts, ids = [], []
    for n in (1, 2):
        with caller(exporter).start_as_current_span(f"request {n}") as request:
            ids.append(await mq.publish("job", n))
        contexts.append(request.get_span_context())
    await run_until(mq, lambda: len(seen) == 2, "the batch handled")

    (span,) = consumer_spans(exporter)
    assert span.attributes["messaging.batch.message_count"] == 2
    assert span.parent is None
    linked = [(link.context.trace_id, link.context.span_id) for link in span.links]
    assert linked == [(c.trace_id, c.span_id) for c in contexts]
    assert [link.attributes["messaging.message.id"] for link in span.links] == ids


def test_the_sync_publisher_injects_the_context_too(
    redis_url: str, stream: str, exporter: InMemorySpanExporter
) -> None:
    with caller(exporter).start_as_current_span("job") as span, Publisher(redis_url, stream) as p:
        p.publish("job", 1)
    with sync_client(redis_url, stream) as client:
        (entry,) = client.xrange(stream)
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert trace_id in entry[1][b"meta"].decode()


WITHOUT_OTEL = textwrap.dedent(
    """
    import sys

    class Hidden:  # every finder, blind to opentelemetry: as if the extra were absent
        def __init__(self, finder):
            self.finder = finder

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                return None
            return self.finder.find_spec(name, path, target)

    sys.meta_path[:] = [Hidden(finder) for finder in sys.meta_path]
    import anyio
    from streamq import Message, MessageQueue, StartFrom, tracing

    async def main():
        seen = []
        mq = MessageQueue(sys.argv[1], stream=sys.argv[2], group="g", start=StartFrom.EARLIEST)
        mq.handler("job")(lambda msg: seen.append(msg.meta))
        async with mq, anyio.create_task_group() as tg:
            await mq.publish("job", 1)
            await tg.start(mq.run)
            with anyio.fail_after(10):
                while not seen:
                    await anyio.sleep(0.01)
            await mq.stop()
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(tracing.AVAILABLE, seen, loaded)

    anyio.run(main)
    """
)


@pytest.mark.slow
def test_nothing_is_imported_without_the_extra(redis_url: str, stream: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, redis_url, stream],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False [{}] []"


async def test_the_tracing_middleware_is_outermost(
    make_queue: QueueFactory, exporter: InMemorySpanExporter
) -> None:
    """Tracing is a handler middleware put before the user's: theirs run in the span."""
    mq = make_queue()
    seen: list[tuple[bool, int]] = []

    async def user_middleware(msg: Any, call_next: Any) -> Any:
        span = trace.get_current_span()
        seen.append((span.is_recording(), span.get_span_context().span_id))
        return await call_next(msg)

    mq.add_middleware(user_middleware)
    mq.handler("job")(lambda msg: None)
    await mq.publish("job", 1)
    await run_until(mq, lambda: len(seen) == 1, "the job handled")
    (span,) = consumer_spans(exporter)
    assert seen == [(True, span.context.span_id)], "the user's middleware runs in the span"


async def test_without_a_tracer_provider_the_routes_are_the_registered_ones(
    make_queue: QueueFactory,
) -> None:
    """No tracer provider: nothing wraps the handlers (no cost per message). The consumer's
    routes are the registered ones, given the queue's payload settings (their parser),
    each calling the registered handler itself."""
    mq = make_queue()
    handled: list[int] = []

    async def job(msg: Message[int]) -> None:
        handled.append(msg.data)

    mq.handler("job")(job)
    route = mq.route_table.routes["job"]
    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        consumer: Any = mq._consumer
        running = consumer.router.routes["job"]
        assert running.single is job and route.single is job, "a wrapper around the handler"
        assert running.middlewares == route.middlewares
        await mq.publish("job", 1)
        await wait_for(lambda: handled == [1], what="the job handled")
        await mq.stop()


async def test_each_handler_call_is_a_span_so_a_retry_in_process_is_another(
    make_queue: QueueFactory, exporter: InMemorySpanExporter
) -> None:
    """The span wraps one call of the handler chain: a failed call and its retry are two
    spans of the message, the first recording the error."""
    mq = make_queue(retry=RetryPolicy(attempts=2, max_deliveries=1, backoff=0.0))
    calls: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        calls.append(msg.data)
        if len(calls) == 1:
            raise ValueError("database restarting")

    entry_id = await mq.publish("job", 1)
    await run_until(mq, lambda: mq.stats()["acked"] == 1, "the job handled on its retry")
    first, second = consumer_spans(exporter)
    assert (
        first.attributes["messaging.message.id"]
        == entry_id
        == second.attributes["messaging.message.id"]
    )
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "ValueError"
    assert second.status.status_code is StatusCode.UNSET


async def test_the_trace_context_is_injected_inside_the_users_publish_middlewares(
    make_queue: QueueFactory, exporter: InMemorySpanExporter
) -> None:
    """Injection is the innermost publish middleware: a span a user's middleware opens
    around the publish is the consumer span's parent, and the user's middleware sees the
    meta as the caller gave it."""
    mq = make_queue()
    given: list[Any] = []
    handled: list[int] = []

    async def publish_span(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        given.append(meta)
        with caller(exporter).start_as_current_span(f"send {message_type}"):
            return await call_next(message_type, data, meta)

    mq.add_middleware(publish_span)
    mq.handler("job")(lambda msg: handled.append(msg.data))
    await mq.publish("job", 1, meta={"k": "v"})
    await run_until(mq, lambda: handled == [1], "the job handled")
    (send,) = [s for s in exporter.get_finished_spans() if s.name == "send job"]
    (span,) = consumer_spans(exporter)
    assert span.parent is not None and span.parent.span_id == send.context.span_id
    assert given == [{"k": "v"}]


async def test_a_fan_out_subscriber_traces_through_the_same_middleware(
    make_queue: QueueFactory, stream: str, exporter: InMemorySpanExporter
) -> None:
    mq = make_queue(group=None, start=StartFrom.EARLIEST)
    inside: list[bool] = []

    async def user_middleware(msg: Any, call_next: Any) -> Any:
        inside.append(trace.get_current_span().is_recording())
        return await call_next(msg)

    mq.add_middleware(user_middleware)
    mq.handler("job")(lambda msg: None)
    await mq.publish("job", 1)
    await run_until(mq, lambda: inside == [True], "the job handled in its span")
    (span,) = consumer_spans(exporter)
    assert span.attributes["messaging.destination.name"] == stream
    assert span.attributes["messaging.consumer.group.name"] == ""
