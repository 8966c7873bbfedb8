"""A consumer's life as its queue reports it: ``stats()`` (empty before a run, then every
documented figure), ``done``, ``stop_reason``, ``auto_stopped``, the error ``run()``
raises, ``health()``, and a queue that runs again after a stop. (DESIGN.md public API;
docs/guides/lifecycle.md; ``MessageQueue.stats``/``health`` docstrings; ERROR_HANDLING.md
row "An unrecoverable Redis error in the read loop"; services.md "Running": fan-out's
``health()`` has ``pending`` and ``lag`` None.)"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, RedisFailure
from tests.consume.contract.modes import Mode
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

# mq.stats(): counters, the in_flight gauge, the histograms (MessageQueue.stats)
DOCUMENTED_FIGURES = {
    "received", "handled", "failed", "retried", "dead_lettered", "skipped", "claimed", "acked",
    "scheduled_moved", "in_flight", "handler_seconds", "batch_size",
    "scheduled_lateness_seconds",
}  # fmt: skip


def journal(mq: MessageQueue) -> list[int]:
    handled: list[int] = []

    @mq.handler("job")
    async def keep(msg: Message[int]) -> None:
        handled.append(msg.data)

    return handled


async def test_before_a_run_nothing_is_reported_and_stop_returns_at_once(mode: Mode) -> None:
    mq = mode.queue()
    journal(mq)
    async with mq:
        assert mq.stats() == {}
        assert (mq.stop_reason, mq.auto_stopped, mq.done.is_set()) == (None, False, False)
        with anyio.fail_after(1):
            await mq.stop()


async def test_stats_report_every_documented_figure(mode: Mode) -> None:
    mq = mode.queue()
    handled = journal(mq)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with mq.running():
            await wait_for(lambda: handled == [1], what="handled")
            running = mq.stats()
        assert mq.stats().keys() == running.keys(), "the figures outlive the run"
    missing = DOCUMENTED_FIGURES - running.keys()
    assert not missing, f"stats() lacks {sorted(missing)}"
    for name in ("handler_seconds", "batch_size", "scheduled_lateness_seconds"):
        assert {"buckets", "sum", "count"} <= running[name].keys(), name


async def test_a_stopped_queue_runs_again_with_a_fresh_done_and_reason(mode: Mode) -> None:
    mq = mode.queue()
    handled = journal(mq)
    async with mq:
        for n in (1, 2):
            await mq.publish("job", n, key="a")
            async with anyio.create_task_group() as tg:
                tg.start_soon(mq.run)
                await wait_for(handled_count(handled, n), what=f"run {n} handled its entry")
                assert not mq.done.is_set() and mq.stop_reason is None
                health = await mq.health()
                assert (health["ready"], health["consuming"]) == (True, True)
                if not mode.grouped:  # no group: nothing pending, no lag to report
                    assert (health["pending"], health["lag"]) == (None, None)
                await mq.stop()
            assert mq.done.is_set()
            assert (mq.stop_reason, mq.auto_stopped) == ("stopped", False)
            assert (await mq.health())["consuming"] is False
    assert handled == [1, 2]


async def test_an_unrecoverable_read_error_stops_with_reason_error_and_run_raises(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    mq = mode.queue()
    handled = journal(mq)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: handled == [1], what="handled")
            tg.cancel_scope.cancel()
        for stream in mq.streams:  # the streams replaced by strings
            pipe = client_for(stream).pipeline(transaction=True)
            pipe.delete(stream)
            pipe.set(stream, "replaced by a string")
            await pipe.execute()
        with pytest.raises(RedisFailure, match="WRONGTYPE"), anyio.fail_after(5):
            await mq.run()
    assert (mq.stop_reason, mq.auto_stopped, mq.done.is_set()) == ("error", True, True)


def handled_count(handled: list[Any], n: int) -> Callable[[], bool]:
    """Whether ``handled`` holds ``n`` entries (a closure per run, not a late-bound one)."""
    return lambda: len(handled) == n


async def test_a_queue_is_ready_from_the_first_line_of_its_running_block(mode: Mode) -> None:
    """``async with mq.running():`` returns once the consumer reads: ``health()`` says
    ready at once (a readiness probe, a test's first check), not tens of ms later."""
    mq = mode.queue()
    journal(mq)
    async with mq, mq.running():
        health = await mq.health()
    assert (health["ready"], health["consuming"]) == (True, True), health


async def test_a_queue_started_in_a_task_group_is_ready_once_start_returns(mode: Mode) -> None:
    """``await tg.start(mq.run)`` returns once the consumer reads, as ``running()`` does."""
    mq = mode.queue()
    journal(mq)
    async with mq, anyio.create_task_group() as tg:
        await tg.start(functools.partial(mq.run, handle_signals=False))
        health = await mq.health()
        await mq.stop()
    assert (health["ready"], health["consuming"]) == (True, True), health
