"""Metrics: ``mq.stats()`` counts what the consumer did (received, handled, failed,
dead_lettered, claimed, acked: handled and dead-lettered entries alike), its ``in_flight``
gauge and histograms, and the Prometheus collector serves the same figures labelled by
stream, group (``""`` for fan-out) and consumer. (docs/operating/metrics.md;
``MessageQueue.stats``'s docstring; services.md "Fan-out subscribers": no acks, claims or
dead letters, metrics labelled ``group=""``; ERROR_HANDLING.md "Consumer crash": claimed.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, Reject, RetryPolicy
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def reject_odd_numbers(mq: MessageQueue) -> list[int]:
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        if msg.data % 2:
            raise Reject("odd")
        handled.append(msg.data)

    return handled


async def _run_six_entries(mode: Mode, mq: MessageQueue) -> dict[str, Any]:
    """Three handled, three rejected; the stats once everything is settled."""
    handled = reject_odd_numbers(mq)
    async with mq:
        await mq.publish_many("job", list(range(6)), key=lambda n: keys(6)[n])
        async with mq.running():
            await wait_for(lambda: len(handled) == 3, what="the even entries")
            settled = "dead_lettered" if mode.grouped else "failed"
            await wait_for(lambda: mq.stats()[settled] == 3, what="the odd entries settled")
            if mode.grouped:
                await all_acked(mq)
                await wait_for(lambda: mq.stats()["acked"] == 6, what="the acks counted")
            return mq.stats()


async def test_the_counters_say_what_the_consumer_did(mode: Mode) -> None:
    stats = await _run_six_entries(mode, mode.queue())
    assert (stats["received"], stats["handled"], stats["in_flight"]) == (6, 3, 0)
    if mode.grouped:  # acked: handled and dead-lettered entries alike
        assert (stats["dead_lettered"], stats["acked"], stats["failed"]) == (3, 6, 0)
    else:  # nothing acked or dead-lettered without a group: the failures are counted
        assert (stats["dead_lettered"], stats["acked"], stats["failed"]) == (0, 0, 3)


async def test_the_handler_seconds_histogram_counts_every_handler_call(mode: Mode) -> None:
    stats = await _run_six_entries(mode, mode.queue())
    assert stats["handler_seconds"]["count"] == 6


async def test_claimed_counts_the_entries_taken_over_from_a_dead_consumer(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    mode.skip_unless("shared", "ordered", does_not="claim", where=FANOUT_DOC)
    mq = mode.queue(claim_idle=0.2, claim_interval=0.05, retry=RetryPolicy(attempts=1))
    handled = reject_odd_numbers(mq)
    async with mq:
        await mq.publish_many("job", [0, 2, 4, 6], key=lambda n: f"key-{n}")
        for stream in mq.streams:  # a consumer that read them and died
            await client_for(stream).xreadgroup("g", "dead", {stream: ">"}, count=10)
        async with mq.running():
            await wait_for(lambda: len(handled) == 4, what="the dead consumer's entries")
            await all_acked(mq)
            stats = mq.stats()
    assert stats["claimed"] == 4


async def test_prometheus_serves_the_counters_labelled_by_stream_group_and_consumer(
    mode: Mode,
) -> None:
    from prometheus_client import CollectorRegistry

    from streamq.metrics import QueueCollector

    mq = mode.queue()
    stats = await _run_six_entries(mode, mq)
    registry = CollectorRegistry()
    collector = QueueCollector(mq)
    registry.register(collector)
    labels = {"stream": mq.stream, "group": mq.group or "", "consumer": mq.consumer}
    try:
        for name in ("received", "handled", "failed", "dead_lettered", "skipped", "acked"):
            value = registry.get_sample_value(f"streamq_{name}_total", labels)
            assert value == stats[name], f"streamq_{name}_total"
        assert registry.get_sample_value("streamq_in_flight", labels) == 0
    finally:
        collector.close()
