"""Retries: a failing handler is retried in process per ``RetryPolicy``; a delivery that
still fails is delivered again (a group) with its count grown; ``Retry(delay)`` asks for
a later delivery. (docs/guides/delivery.md; ERROR_HANDLING.md rows "Handler raises an
exception", "Handler raises Retry"; docs/guides/ordering.md "A handler fails",
"Retry(delay=...)"; services.md "Fan-out subscribers": Retry counts as a failure.)"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from itertools import pairwise
from typing import TypeVar

import anyio
import pytest

from streamq import Message, MessageQueue, Retry, RetryPolicy
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def failing_until(mq: MessageQueue, call: int, note: Callable[[Message[int]], T]) -> list[T]:
    """A ``job`` handler that raises until its ``call``-th call; what ``note`` takes of each
    call, in order."""
    notes: list[T] = []

    @mq.handler("job")
    async def flaky(msg: Message[int]) -> None:
        notes.append(note(msg))
        if len(notes) < call:
            raise RuntimeError("transient")

    return notes


async def test_in_process_retries_then_success_is_one_delivery(mode: Mode) -> None:
    mq = mode.queue(retry=RetryPolicy(attempts=3, backoff=0.01, jitter=0.0))
    calls = failing_until(mq, 3, lambda msg: msg.delivery_count)
    async with mq:
        await mq.publish("job", 1, key="k")
        async with mq.running():
            await wait_for(lambda: mq.stats()["handled"] == 1, what="handled after retries")
            await all_acked(mq)
            stats = mq.stats()
    assert calls == [1, 1, 1], "in-process retries are not new deliveries"
    assert (stats["retried"], stats["failed"], stats["dead_lettered"]) == (1, 0, 0)


async def test_a_failed_delivery_is_delivered_again_with_its_count_grown(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="redeliver", where=FANOUT_DOC)
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=5)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    deliveries: list[int] = []

    @mq.handler("job")
    async def fails_twice(msg: Message[int]) -> None:
        deliveries.append(msg.delivery_count)
        if msg.delivery_count < 3:
            raise RuntimeError("not yet")

    async with mq:
        await mq.publish("job", 1, key="k")
        async with mq.running():
            await wait_for(lambda: mq.stats()["handled"] == 1, what="the third delivery")
            await all_acked(mq)
            stats = mq.stats()
    assert deliveries == [1, 2, 3]
    assert (stats["failed"], stats["dead_lettered"]) == (2, 0)


async def test_retry_signal_delivers_again_after_its_delay(mode: Mode) -> None:
    mq = mode.queue(claim_idle=30)  # only the Retry path can bring it back this fast
    seen: list[tuple[int, float]] = []

    @mq.handler("job")
    async def later(msg: Message[int]) -> None:
        seen.append((msg.delivery_count, anyio.current_time()))
        if msg.delivery_count == 1:
            raise Retry(delay=0.3)

    async with mq:
        await mq.publish("job", 1, key="k")
        async with mq.running():
            if not mode.grouped:  # no redelivery without a group: Retry is a failure
                await wait_for(lambda: mq.stats()["failed"] == 1, what="Retry as a failure")
                await anyio.sleep(0.5)  # the delay has passed: nothing comes back
                assert len(seen) == 1 and mq.stats()["handled"] == 0
                return
            await wait_for(lambda: len(seen) == 2, what="the delivery after the delay")
            await wait_for(lambda: mq.stats()["handled"] == 1, what="handled")
    (first, t1), (second, t2) = seen
    assert (first, second) == (1, 2)
    assert t2 - t1 >= 0.28, f"delivered again after {t2 - t1:.3f}s, asked for 0.3s"


async def test_retry_delay_longer_than_claim_idle_is_kept_by_every_consumer(mode: Mode) -> None:
    """``Retry(delay)`` past ``claim_idle``: no consumer's claim pass takes the entry back
    early, neither the one that holds it nor another of the group. (Ordered mode: one
    consumer, as only a partition's owner reads its pending list; after a change of owner
    the new one runs a waiting entry at once: docs/guides/ordering.md, "Takeover".)"""
    mode.skip_unless("shared", "ordered", does_not="redeliver", where=FANOUT_DOC)
    timings = {"claim_idle": 0.5, "claim_interval": 0.05}
    queues = [mode.queue(**timings) for _ in range(2 if mode.kind == "shared" else 1)]
    seen: list[tuple[int, float]] = []
    for mq in queues:

        @mq.handler("job")
        async def later(msg: Message[int]) -> None:
            seen.append((msg.delivery_count, anyio.current_time()))
            if msg.delivery_count == 1:
                raise Retry(delay=2.0)

    async with AsyncExitStack() as running:
        for mq in queues:
            await running.enter_async_context(mq)
            await running.enter_async_context(mq.running())
        await queues[0].publish("job", 1, key="k")
        await wait_for(lambda: len(seen) == 2, timeout=10, what="the delivery after the delay")
        await anyio.sleep(0.6)  # a third delivery would come past claim_idle
    (first, t1), (second, t2) = seen
    assert (first, second) == (1, 2), seen
    assert t2 - t1 >= 1.95, f"delivered again after {t2 - t1:.2f}s, asked for 2s"


async def test_in_process_retries_wait_the_backoff_before_each_retry(mode: Mode) -> None:
    """``RetryPolicy(backoff=b)``: the waits between a single handler's attempts are b, 2b,
    4b, ... (capped at ``max_backoff``), the first retry included."""
    policy = RetryPolicy(attempts=4, backoff=0.15, max_backoff=0.5, jitter=0.0)
    mq = mode.queue(retry=policy)
    calls = failing_until(mq, 4, lambda _msg: anyio.current_time())
    async with mq:
        await mq.publish("job", 1, key="k")
        async with mq.running():
            await wait_for(lambda: mq.stats()["handled"] == 1, what="handled after retries")
    gaps = [round(later - earlier, 2) for earlier, later in pairwise(calls)]
    expected = [0.15, 0.3, 0.5]
    assert all(e - 0.02 <= g <= e + 0.25 for g, e in zip(gaps, expected, strict=True)), gaps
