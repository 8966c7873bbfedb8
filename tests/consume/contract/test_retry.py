"""Retries: a failing handler is retried in process per ``RetryPolicy``; a delivery that
still fails is delivered again (a group) with its count grown; ``Retry(delay)`` asks for
a later delivery. (docs/guides/delivery.md; ERROR_HANDLING.md rows "Handler raises an
exception", "Handler raises Retry"; docs/guides/ordering.md "A handler fails",
"Retry(delay=...)"; services.md "Fan-out subscribers": Retry counts as a failure.)"""

from __future__ import annotations

import anyio
import pytest

from streamq import Message, Retry, RetryPolicy
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_in_process_retries_then_success_is_one_delivery(mode: Mode) -> None:
    mq = mode.queue(retry=RetryPolicy(attempts=3, backoff=0.01, jitter=0.0))
    calls: list[int] = []

    @mq.handler("job")
    async def flaky(msg: Message[int]) -> None:
        calls.append(msg.delivery_count)
        if len(calls) < 3:
            raise RuntimeError("transient")

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
