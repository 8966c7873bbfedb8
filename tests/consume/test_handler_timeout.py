"""``handler_timeout``: an attempt that runs longer is cancelled and counts as a failure
(``TimeoutError``), then follows the failure path: retried in process, delivered again,
dead-lettered (ERROR_HANDLING.md row "Handler takes too long")."""

from __future__ import annotations

import time

import anyio
import pytest

from streamq import Message, MessageQueue, RetryPolicy
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_handler_timeout_counts_as_failure(make_queue: QueueFactory) -> None:
    mq = make_queue(handler_timeout=0.1, retry=RetryPolicy(attempts=1, max_deliveries=1))

    @mq.handler("job")
    async def hangs(msg: Message[int]) -> None:
        await anyio.sleep(10)

    async with mq:
        await mq.publish("job", 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: _dead_count(mq), what="dead letter after timeout")
            await mq.stop()
        (letter,) = await mq.dead_letters()
        assert "TimeoutError" in letter.error


async def _dead_count(mq: MessageQueue) -> bool:
    return (await mq.topic_info()).dead_letters > 0


async def test_each_attempt_has_its_own_timeout_and_a_later_one_may_succeed(
    make_queue: QueueFactory,
) -> None:
    retry = RetryPolicy(attempts=2, backoff=0.01, jitter=0.0, max_deliveries=1)
    mq = make_queue(handler_timeout=0.2, retry=retry)
    attempts: list[int] = []

    @mq.handler("job")
    async def slow_first_time(msg: Message[int]) -> None:
        attempts.append(msg.delivery_count)
        if len(attempts) == 1:
            await anyio.sleep(10)  # cancelled after 0.2 s
        await anyio.sleep(0.1)  # within its own 0.2 s, not what is left of the first

    async with mq, mq.running():
        await mq.publish("job", 1)
        await wait_for(lambda: mq.stats()["handled"] == 1, what="the second attempt handled")
        assert attempts == [1, 1] and await mq.dead_letters() == []
        assert mq.stats()["retried"] == 1


async def test_a_plain_def_handler_past_its_timeout_fails_and_its_thread_keeps_its_slot(
    make_queue: QueueFactory,
) -> None:
    """A thread cannot be cancelled: the attempt of a plain ``def`` handler past
    ``handler_timeout`` is abandoned and counts as a failure (``TimeoutError``); its thread
    runs to its end and holds its slot until then, so no more than ``concurrency`` handler
    threads run at once."""
    retry = RetryPolicy(attempts=1, max_deliveries=1)
    mq = make_queue(handler_timeout=0.2, retry=retry, concurrency=1)
    spans: list[tuple[int, float, float]] = []

    @mq.handler("job")
    def blocks(msg: Message[int]) -> None:
        started = time.monotonic()
        time.sleep(1.0 if msg.data == 0 else 0.01)
        spans.append((msg.data, started, time.monotonic()))

    async with mq, mq.running():
        await mq.publish_many("job", [0, 1])
        await wait_for(lambda: _dead_count(mq), what="the slow entry dead-lettered")
        await wait_for(lambda: len(spans) == 2, what="both handler calls ended")
        (letter,) = await mq.dead_letters()
    assert "TimeoutError" in letter.error, letter.error
    (_, _, slow_end), (_, fast_start, _) = sorted(spans)
    assert fast_start >= slow_end, f"two handler threads ran at once: {spans}"
