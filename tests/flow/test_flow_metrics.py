"""Entries held back for flow control, by reason, in ``mq.stats()`` (``waiting_pause``,
``waiting_rate_limit``, ``waiting_throttle``) and for Prometheus
(``streamq_waiting_entries{reason=...}``; docs/operating/metrics.md)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streamq import Message, MessageQueue
from streamq.metrics import QueueCollector
from tests.helpers.held_back import HELD_BACK_LIMITS, register_held_back_handlers
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

EXPECTED = {"pause": 2, "rate_limit": 3, "throttle": 1}


def waiting(mq: MessageQueue) -> dict[str, Any]:
    stats = mq.stats()
    return {reason: stats.get(f"waiting_{reason}") for reason in EXPECTED}


async def test_entries_held_back_are_exported_by_reason(make_queue: QueueFactory) -> None:
    mq = make_queue(rate_limits=HELD_BACK_LIMITS)
    handled: list[str] = []
    register_held_back_handlers(mq, handled)  # of 4 e-mails 3 wait, 2 reports, 1 call

    registry = CollectorRegistry()
    collector = QueueCollector(mq)
    registry.register(collector)
    labels = {"stream": mq.stream, "group": mq.group or "", "consumer": mq.consumer}
    try:
        async with mq:
            await mq.pause("report")
            async with mq.running():
                await mq.publish_many("email", [0, 1, 2, 3])
                await mq.publish_many("report", [0, 1])
                await mq.publish("call", 0, key="tenant-a")
                await wait_for(lambda: waiting(mq) == EXPECTED, what=f"waiting {EXPECTED}")
                for reason, count in EXPECTED.items():
                    sample = registry.get_sample_value(
                        "streamq_waiting_entries", {**labels, "reason": reason}
                    )
                    assert sample == count, reason
                assert sorted(handled) == ["call-0", "email-0"]
                await mq.resume("report")
                await wait_for(lambda: waiting(mq)["pause"] == 0, what="the reports released")
                sample = registry.get_sample_value(
                    "streamq_waiting_entries", {**labels, "reason": "pause"}
                )
                assert sample == 0
    finally:
        collector.close()


async def test_the_waiting_series_show_once_a_consumer_runs_and_read_zero_without_waits(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    registry = CollectorRegistry()
    collector = QueueCollector(mq)
    registry.register(collector)
    labels = {"stream": mq.stream, "group": mq.group or "", "consumer": mq.consumer}
    try:
        assert (
            registry.get_sample_value("streamq_waiting_entries", {**labels, "reason": "pause"})
            is None
        )
        async with mq, mq.running():
            await mq.publish("job", 1)
            await wait_for(lambda: mq.stats().get("handled") == 1, what="the entry handled")
            sample = registry.get_sample_value(
                "streamq_waiting_entries", {**labels, "reason": "pause"}
            )
            assert sample == 0  # a running consumer of a group reports its waits, none
    finally:
        collector.close()
