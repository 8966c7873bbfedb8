"""The soak's fault injector (tests/soak/faults.py): a fault reaches the stream it is about
on a cluster, and a fault that fails is reported as a failure of the soak."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from streamq import MessageQueue, StartFrom
from streamq.wire.client import connect
from streamq.wire.slots import slot_of
from tests.soak.faults import Injector
from tests.soak.processes import Consumers
from tests.soak.soak_consumer import GROUP, MESSAGE_TYPE, Job

pytestmark = pytest.mark.anyio


def idle_consumers(tmp_path: Path) -> Consumers:
    """The soak's consumer slots, none started (the faults tested here touch no process)."""
    return Consumers("", "unused", count=0, seed=1, fail_rate=0.0, run_dir=tmp_path)


async def partition_on_another_node(url: str, admin: MessageQueue) -> str:
    """A partition stream of ``admin``'s topic served by another master than its name."""
    deployment = connect(url)
    try:
        topic_pool = await deployment.pool_for_slot(slot_of(admin.stream))
        for stream in admin.streams:
            if await deployment.pool_for_slot(slot_of(stream)) is not topic_pool:
                return stream
    finally:
        await deployment.aclose()
    raise AssertionError(f"every partition of {admin.stream} is on the node of its name")


@pytest.mark.slow
async def test_stop_resume_reaches_a_partition_on_another_master(
    streamq_cluster_url: str, tmp_path: Path
) -> None:
    topic = f"soak-test-{uuid.uuid4().hex[:8]}"
    async with MessageQueue(streamq_cluster_url, stream=topic, group=GROUP, partitions=4,
                            start=StartFrom.EARLIEST) as admin:  # fmt: skip
        await admin.publish_many(MESSAGE_TYPE, [Job(producer=0, seq=i) for i in range(40)])
        victim = await partition_on_another_node(streamq_cluster_url, admin)
        deployment = connect(streamq_cluster_url)
        try:
            injector = Injector(random.Random(1), idle_consumers(tmp_path), deployment.client_for,
                                0, None, list, victim_stream=victim)  # fmt: skip
            injector.kinds = ["stop_resume"]
            line = await injector.inject()
        finally:
            await deployment.aclose()
        assert line.startswith("stop_resume: stopped 5 entries"), line
        assert injector.failures == [] and injector.counts["stop_resume"] == 1
        await admin.terminate_topic()


async def test_a_fault_that_fails_is_counted_as_a_failure_with_its_error(
    redis_url: str, tmp_path: Path
) -> None:
    deployment = connect(redis_url)
    try:  # a keeper kill where no shared server was ever started cannot happen
        injector = Injector(random.Random(1), idle_consumers(tmp_path), deployment.client_for,
                            0, None, list, shared_home=tmp_path / "home")  # fmt: skip
        injector.kinds = ["keeper_kill"]
        line = await injector.inject()
    finally:
        await deployment.aclose()
    assert line.startswith("keeper_kill FAILED: RuntimeError('no shared server recorded"), line
    assert injector.counts["keeper_kill"] == 0
    assert injector.failures == [line.replace(" FAILED:", " failed:", 1)]
