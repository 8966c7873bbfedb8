"""Issue 27 item 6: whatever reading an entry raises, in any optional part (tracing with the
[otel] SDK, a span processor, decoding), is that entry's failure: counted, retried within
``max_deliveries``, dead-lettered with the reason; never an escape from delivery counting,
never a consumer crash."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, RetryPolicy, tracing
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

otel = pytest.importorskip("opentelemetry.sdk.trace", reason="these tests need the OTel SDK")
from opentelemetry.sdk.trace import SpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

pytestmark = pytest.mark.anyio

NESTED = b"[" * 100_000 + b"]" * 100_000  # deeper than any JSON parser's recursion limit


class Refusing(SpanProcessor):
    """A span processor that raises for the spans of entries of one type (a broken
    exporter or instrumentation): ``when`` is "start" or "end"."""

    def __init__(self, type_name: str, when: str) -> None:
        self.type_name, self.when = type_name, when

    def _check(self, span: Any, when: str) -> None:
        if when == self.when and span.attributes.get("streamq.message.type") == self.type_name:
            raise RuntimeError(f"span processor broke at {when}")

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._check(span, "start")

    def on_end(self, span: Any) -> None:
        self._check(span, "end")


@contextmanager
def traced(*processors: Any) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for processor in processors:
        provider.add_span_processor(processor)
    tracing.set_tracer_provider(provider)
    yield exporter
    tracing.set_tracer_provider(None)
    provider.shutdown()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with traced() as spans:
        yield spans


async def dead_letters(mq: MessageQueue) -> dict[str, Any]:
    return {d.original_id: d for d in await mq.dead_letters()}


async def pending(client: aioredis.Redis, stream: str) -> int:
    return int((await client.xpending(stream, "g"))["pending"])


async def run_until(mq: MessageQueue, predicate: Any, what: str, timeout: float = 20) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(mq.run)
        await wait_for(predicate, timeout=timeout, what=what)
        await mq.stop()


def streamq_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """ERROR records streamq made about something other than a dead letter."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("streamq") and r.levelno >= logging.ERROR
        and r.name != "streamq.topic.deadletter"
    ]  # fmt: skip


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_deeply_nested_meta_with_tracing_on_is_dead_lettered_with_a_reason(
    make_queue: QueueFactory,
    client: aioredis.Redis,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    batch: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="streamq")
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=3))
    handled: list[int] = []
    if batch:
        mq.batch_handler("job", size=2, timeout=0.05)(
            lambda msgs: handled.extend(m.data for m in msgs)
        )
    else:
        mq.handler("job")(lambda msg: handled.append(msg.data))
    async with mq:
        await mq.publish("job", 1)
        nested = await client.xadd(mq.stream, {"type": "job", "data": "2", "meta": NESTED})
        await mq.publish("job", 3)
        nested_id = nested.decode()
        await run_until(
            mq, lambda: mq.stats()["dead_lettered"] == 1 and len(handled) == 2, "the outcomes"
        )
        letter = (await dead_letters(mq))[nested_id]
        assert await pending(client, mq.stream) == 0, "nothing left pending"
    assert sorted(handled) == [1, 3]
    assert "meta" in letter.error and letter.attempts <= 3, letter.error
    assert streamq_errors(caplog) == [], "no error escaped the entry's own outcome"


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_a_span_processor_that_raises_makes_its_entry_fail_within_max_deliveries(
    make_queue: QueueFactory, client: aioredis.Redis, batch: bool
) -> None:
    with traced(Refusing("poison", "start")):
        mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2))
        handled: list[int] = []
        for name in ("job", "poison"):
            if batch:
                mq.batch_handler(name, size=2, timeout=0.05)(
                    lambda msgs: handled.extend(m.data for m in msgs)
                )
            else:
                mq.handler(name)(lambda msg: handled.append(msg.data))
        async with mq:
            await mq.publish("job", 1)
            poison_id = await mq.publish("poison", 2)
            await run_until(
                mq, lambda: mq.stats()["dead_lettered"] == 1 and handled == [1], "the outcomes"
            )
            letter = (await dead_letters(mq))[poison_id]
            assert await pending(client, mq.stream) == 0
        # counted: dead-lettered at max_deliveries, not before (a claim race can add one)
        assert letter.attempts >= 2 and mq.stats()["failed"] >= 2
        # tracing is the outermost handler middleware: its failure is the handler call's
        assert re.match(r"failed \d deliveries; last error: ", letter.error), letter.error
        assert "span processor broke at start" in letter.error, letter.error


async def test_a_span_that_cannot_end_leaves_its_handled_entry_handled(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Ending the span comes after the outcome: its failure is reported, the entry stays
    handled (acknowledged once, not redelivered, not dead-lettered)."""
    caplog.set_level(logging.WARNING, logger="streamq")
    with traced(Refusing("job", "end")):
        mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2))
        handled: list[int] = []
        mq.handler("job")(lambda msg: handled.append(msg.data))
        async with mq:
            await mq.publish_many("job", [1, 2])
            await run_until(mq, lambda: mq.stats()["acked"] == 2, "both acked")
            assert await pending(client, mq.stream) == 0
        assert sorted(handled) == [1, 2] and mq.stats()["dead_lettered"] == 0
    assert any("span processor broke at end" in r.getMessage() for r in caplog.records)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


async def test_an_unprintable_error_with_tracing_on_is_still_dead_lettered(
    make_queue: QueueFactory, client: aioredis.Redis, exporter: InMemorySpanExporter
) -> None:
    """The SDK's record_exception calls str() on the error: recording it on the span is
    best effort, never a way out of the dead letters."""
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2))

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        raise Unprintable()

    async with mq:
        entry_id = await mq.publish("job", 1)
        await run_until(mq, lambda: mq.stats()["dead_lettered"] == 1, "the dead letter")
        letter = (await dead_letters(mq))[entry_id]
        assert await pending(client, mq.stream) == 0
    assert "Unprintable" in letter.error and letter.attempts == 2
