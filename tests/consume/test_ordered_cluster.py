"""Ordered mode on a Redis Cluster whose master fails mid-run: two ordered consumers of a
partitioned topic handle keyed entries while the master serving a partition and the
group's membership is SIGKILLed and its replica takes over. Afterwards nothing published
is lost or left pending, per key no handler call started before every earlier entry of its
key was handled to completion (re-runs of an entry whose ack was lost are allowed),
ownership settles (every partition owned by exactly one of the two, two each), and the
partitions on the other masters never changed hands (their leases were renewed all along)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import anyio
import pytest

from streamq import EmbeddedCluster, Message, MessageQueue, NotReplicatedError, StartFrom
from streamq.server.cluster_nodes import ClusterNode
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.slots import slot_of
from tests.conftest import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(90)]

PARTITIONS, LEASE = 4, 2.0
KEYS, PER_KEY = 16, 40
WORK = 0.025  # per call: a backlog waits in the lanes when the master is killed


class Calls:
    """Every handler call of both consumers, in the order they happened (one event loop)."""

    def __init__(self) -> None:
        self.done: dict[str, set[int]] = defaultdict(set)
        self.skips: list[str] = []
        self.calls = 0

    def register(self, mq: MessageQueue) -> None:
        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            key, n = str(msg.key), int(msg.data["n"])
            self.calls += 1
            if missing := set(range(n)) - self.done[key]:
                self.skips.append(
                    f"{key}/{n} (token {msg.fencing_token}) before {sorted(missing)} done"
                )
            await anyio.sleep(WORK)
            self.done[key].add(n)

    def handled(self) -> int:
        return sum(map(len, self.done.values()))


def _queue(url: str, topic: str, consumer: str) -> MessageQueue:
    return MessageQueue(url, stream=topic, group="g", consumer=consumer, partitions=PARTITIONS,
                        ordered=True, ownership_lease=LEASE, block=0.2, concurrency=4,
                        start=StartFrom.EARLIEST)  # fmt: skip


async def _publish(mq: MessageQueue, start: int, stop: int, published: list[str]) -> None:
    """Entries ``start..stop`` of every key, each once a replica has it (``replicas=1``): a
    master killed right after an acknowledged XADD then cannot lose it."""
    for n in range(start, stop):
        for k in range(KEYS):
            try:
                published.append(await mq.publish("job", {"n": n}, key=f"k{k}", replicas=1))
            except NotReplicatedError as e:  # added to a master without its replica yet
                published.append(e.entry_id)


async def _settled(mq: MessageQueue, consumers: list[MessageQueue]) -> bool:
    """Every partition owned by one of ``consumers``, two each, and each agrees."""
    owners = [None if o is None else o[0] for o in await mq.partition_owners()]
    names = [c.consumer for c in consumers]
    if sorted(map(str, owners)) != sorted(names * (PARTITIONS // len(names))):
        return False
    return all(
        sorted(c.stats()["owned_partitions"])
        == [i for i, o in enumerate(owners) if o == c.consumer]
        for c in consumers
    )


def _on_one_master(cluster: EmbeddedCluster, prefix: str) -> tuple[str, ClusterNode]:
    """A topic whose first partition and own slot (the group's membership) are served by
    one master, and that master."""
    victim = cluster.master_of_slot(slot_of(partition_streams(prefix, PARTITIONS)[0]))
    for i in itertools.count():
        topic = f"{prefix}-{i}"
        first = slot_of(partition_streams(topic, PARTITIONS)[0])
        if all(any(a <= slot <= b for a, b in victim.slots) for slot in (first, slot_of(topic))):
            return topic, victim
    raise AssertionError("unreachable")


def _served_by(victim: ClusterNode, topic: str) -> set[int]:
    streams = partition_streams(topic, PARTITIONS)
    return {i for i, s in enumerate(streams) if any(a <= slot_of(s) <= b for a, b in victim.slots)}


async def _nothing_pending(mq: MessageQueue) -> bool:
    return (await mq.topic_info()).pending == 0


async def test_ordered_consumers_keep_keys_in_order_through_a_master_failover(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    topic, victim = _on_one_master(replicated, replicated_stream)
    on_victim = _served_by(victim, topic)
    try:
        await _run(replicated, topic, victim, on_victim)
    finally:
        replicated.wait_ready()
        for name in (topic, *partition_streams(topic, PARTITIONS)):
            delete_stream_keys(replicated.url, name)


async def _run(
    replicated: EmbeddedCluster, topic: str, victim: ClusterNode, on_victim: set[int]
) -> None:
    url = next(n.url for n in replicated.nodes if n.role == "master" and n.port != victim.port)
    publisher = MessageQueue(url, stream=topic, group="g", partitions=PARTITIONS,
                             start=StartFrom.EARLIEST)  # fmt: skip
    consumers = [_queue(url, topic, name) for name in ("a", "b")]
    calls, published = Calls(), list[str]()
    for mq in consumers:
        calls.register(mq)

    def failover() -> None:
        replicated.kill_node(victim.port)
        replicated.wait_ready()  # its replica took over partition 0 and the membership
        replicated.restart_node(victim.port)  # back as the new master's replica

    async with publisher, consumers[0], consumers[1]:
        await _publish(publisher, 0, 4, published)  # the topic exists before they start
        async with consumers[0].running(), consumers[1].running():
            await wait_for(lambda: _settled(publisher, consumers), timeout=15,
                           what="a and b own two partitions each")  # fmt: skip
            async with anyio.create_task_group() as tg:
                tg.start_soon(_publish, publisher, 4, PER_KEY, published)
                await wait_for(lambda: calls.handled() >= KEYS * PER_KEY // 4, timeout=20,
                               what="entries handled before the kill")  # fmt: skip
                unhandled_at_kill = KEYS * PER_KEY - calls.handled()
                before = await publisher.partition_owners()
                await anyio.to_thread.run_sync(failover)
            await wait_for(lambda: calls.handled() == KEYS * PER_KEY, timeout=30,
                           what=f"every entry handled ({calls.handled()} of {KEYS * PER_KEY})")  # fmt: skip
            await wait_for(lambda: _settled(publisher, consumers), timeout=15,
                           what="ownership settled after the failover")  # fmt: skip
            await wait_for(lambda: _nothing_pending(publisher), timeout=15,
                           what="every entry acknowledged (none left pending)")  # fmt: skip
            after = await publisher.partition_owners()
            for mq in consumers:
                assert mq.stop_reason is None, f"{mq.consumer} stopped: {mq.stop_reason}"
    assert replicated.master_of_slot(slot_of(partition_streams(topic, PARTITIONS)[0])).port != (
        victim.port
    ), "no failover happened"
    elsewhere = set(range(PARTITIONS)) - on_victim
    changed = {p: (before[p], after[p]) for p in elsewhere if before[p] != after[p]}
    assert elsewhere and not changed, f"partitions on healthy masters changed hands: {changed}"
    assert unhandled_at_kill > 0, "everything was handled before the master was killed"
    assert len(set(published)) == KEYS * PER_KEY
    assert calls.skips == [], f"{len(calls.skips)} calls skipped ahead: {calls.skips[:5]}"
    lost = {k: set(range(PER_KEY)) - calls.done[f"k{k}"] for k in range(KEYS)}
    assert not any(lost.values()), f"never handled: {lost}"
