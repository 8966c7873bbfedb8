"""streamq on a real Redis Cluster (embedded valkey-server processes): the URL of any node
works for every feature; a master killed under load and a slot migrated under a running
consumer are ridden through with nothing lost."""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable, Iterator

import anyio
import pytest
import redis

from streamq import (
    CleanupPolicy,
    ConfigError,
    EmbeddedCluster,
    Message,
    MessageQueue,
    NotReplicatedError,
    Publisher,
)
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect_sync
from streamq.wire.keys import Keys
from streamq.wire.slots import SlotTable, slot_of
from tests.helpers.queues import ok_and_poison, queue
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def masters(url: str, stream: str) -> tuple[str, str]:
    """(URL of the master serving ``stream``'s slot, URL of another master), as the
    cluster itself says (CLUSTER SLOTS)."""
    with redis.Redis.from_url(url) as node:
        table = SlotTable()
        table.load(node.execute_command("CLUSTER", "SLOTS"), ("127.0.0.1", 0))
    owner = table.owner(slot_of(stream))
    assert owner is not None, f"nobody serves the slot of {stream!r}"
    other = next(a for a in table.masters() if a != owner)
    return tuple(f"redis://{host}:{port}/0" for host, port in (owner, other))  # type: ignore[return-value]


@pytest.fixture
def cluster_stream(streamq_cluster_url: str) -> Iterator[str]:
    stream = f"test-{os.urandom(6).hex()}"
    yield stream
    delete_stream_keys(streamq_cluster_url, stream)


async def test_every_feature_through_a_node_that_does_not_serve_the_stream(
    streamq_cluster_url: str, cluster_stream: str
) -> None:
    _, other = masters(streamq_cluster_url, cluster_stream)
    mq = queue(other, cluster_stream)
    handled = ok_and_poison(mq)

    async with mq:
        assert mq._deployment.cluster is True  # white box: routed as a cluster
        ids = await mq.publish_many("ok", range(30))
        ids.append(await mq.publish("ok", 30))
        await mq.publish("poison", 0)
        await mq.stop_message(ids[3])
        async with mq.running():
            await wait_for(lambda: len(handled) == 30, what="30 of 31 handled (one stopped)")
            await wait_for(lambda: mq.stats().get("dead_lettered") == 1, what="1 dead letter")
            assert ids[3] not in handled
            await mq.resume_message(ids[3])
            await wait_for(lambda: ids[3] in handled, what="the resumed entry handled")
        info = await mq.topic_info()
        assert (info.length, info.pending, info.dead_letters) == (32, 0, 1)
        (letter,) = await mq.dead_letters()
        assert letter.type == "poison"
        assert sorted(handled) == sorted(ids)
        mq.set_cleanup_policy(CleanupPolicy(min_retention=0, max_stream_length=0))
        assert await mq.cleanup() == 32
        await mq.terminate_topic()
        assert (await mq.topic_info()).exists is False


async def test_a_notice_reaches_a_consumer_on_another_node_through_sharded_pubsub(
    streamq_cluster_url: str, cluster_stream: str
) -> None:
    owner, other = masters(streamq_cluster_url, cluster_stream)
    consumer = queue(owner, cluster_stream, consumer="reader")
    seen: list[str] = []

    @consumer.handler("ok")
    async def ok(msg: Message[int]) -> None:
        seen.append(msg.id)

    operator = queue(other, cluster_stream, consumer="operator")
    async with operator, consumer.running():
        held = await operator.publish("ok", 1)
        await wait_for(lambda: held in seen, what="first entry handled")
        # an entry stopped from another node: the consumer hears of it and keeps it out
        later = await operator.publish("ok", 2)
        await operator.stop_message(later)
        await operator.resume_message(later)
        await wait_for(lambda: later in seen, what="stopped-then-resumed entry handled")
        await operator.terminate_topic()
        await wait_for(lambda: consumer.done.is_set(), what="terminate notice heard")
    assert consumer.stop_reason == "topic_terminated"


def test_the_sync_publisher_works_through_any_node(
    streamq_cluster_url: str, cluster_stream: str
) -> None:
    _, other = masters(streamq_cluster_url, cluster_stream)
    with Publisher(other, stream=cluster_stream) as publisher:
        first = publisher.publish("ok", 1)
        rest = publisher.publish_many("ok", range(10))
    owner, _ = masters(streamq_cluster_url, cluster_stream)
    with redis.Redis.from_url(owner) as node:
        assert [i.decode() for i, _ in node.xrange(cluster_stream)] == [first, *rest]


async def test_cluster_true_on_a_single_node_is_a_config_error(
    redis_url: str, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("needs a server that is not a cluster node; the session's is one")
    async with anyio.create_task_group():
        mq = MessageQueue(redis_url, stream="s", cluster=True)
        with pytest.raises(ConfigError, match="not a cluster node"):
            await mq.open()
    with pytest.raises(ConfigError, match="cluster must be"):
        MessageQueue(redis_url, stream="s", cluster="yes")  # type: ignore[arg-type]


# -- failover and resharding (a cluster of their own: they kill and move things) --------


class Load:
    """A producer publishing through ``url`` until told to stop, and a consumer handling
    through ``url``: what was published (durably when ``replicas``) and what was handled."""

    def __init__(
        self, url: str, stream: str, *, replicas: int = 0, wait: float = 1.0, partitions: int = 1
    ) -> None:
        self.producer = queue(url, stream, consumer="producer", partitions=partitions)
        self.consumer = queue(url, stream, consumer="survivor", partitions=partitions)
        self.replicas, self.wait = replicas, wait
        self.published: list[str] = []
        self.handled: set[str] = set()
        self.enough = anyio.Event()

        @self.consumer.handler("ok")
        async def ok(msg: Message[int]) -> None:
            self.handled.add(msg.id)

    async def produce(self, at_least: int) -> None:
        i = 0
        while not (self.enough.is_set() and i >= at_least):
            try:
                self.published.append(
                    await self.producer.publish("ok", i, replicas=self.replicas, timeout=self.wait)
                )
            except NotReplicatedError as e:  # added (to a master without a replica yet)
                self.published.append(e.entry_id)
            i += 1
            await anyio.sleep(0.002)

    def missing(self) -> set[str]:
        return set(self.published) - self.handled


async def run_under_load(load: Load, disturb: object) -> None:
    """Publish and consume while ``disturb()`` (run in a thread) breaks something; then
    wait until everything published was handled, the consumer never having stopped."""
    async with load.producer, load.consumer.running():
        async with anyio.create_task_group() as tg:
            tg.start_soon(load.produce, 300)
            await wait_for(lambda: len(load.published) >= 100, timeout=20, what="100 published")
            await anyio.to_thread.run_sync(disturb)  # type: ignore[arg-type]
            load.enough.set()
        await wait_for(
            lambda: not load.missing(), timeout=40,
            what=f"every published entry handled ({len(load.missing())} missing)",
        )  # fmt: skip
        assert not load.consumer.done.is_set(), f"consumer stopped: {load.consumer.stop_reason}"


@pytest.mark.parametrize("partitions", [1, 6])
async def test_a_master_killed_under_load_loses_nothing_acknowledged(
    replicated: EmbeddedCluster, replicated_stream: str, partitions: int
) -> None:
    first = partition_streams(replicated_stream, partitions)[0]
    victim = replicated.master_of_slot(slot_of(first))
    survivor = next(n for n in replicated.nodes if n.role == "master" and n.port != victim.port)
    load = Load(survivor.url, replicated_stream, replicas=1, partitions=partitions)

    def failover() -> None:
        replicated.kill_node(victim.port)
        replicated.wait_ready()  # a replica took over the victim's slots
        replicated.restart_node(victim.port)  # back as the new master's replica

    await run_under_load(load, failover)
    assert replicated.master_of_slot(slot_of(first)).port != victim.port


async def test_a_queue_opened_while_its_master_fails_waits_for_the_replica(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    victim = replicated.master_of_slot(slot_of(replicated_stream))
    survivor = next(n for n in replicated.nodes if n.role == "master" and n.port != victim.port)
    replicated.kill_node(victim.port)
    try:
        mq = queue(survivor.url, replicated_stream)
        with anyio.fail_after(30):
            async with mq:  # the group is made once a replica took over the slot
                entry_id = await mq.publish("ok", 1)
                assert (await mq.topic_info()).length == 1, entry_id
        assert replicated.master_of_slot(slot_of(replicated_stream)).port != victim.port
    finally:
        await anyio.to_thread.run_sync(replicated.restart_node, victim.port)


class Migration:
    """A slot moved by hand from its master to another, as ``redis-cli --cluster reshard``
    does: IMPORTING on the target, MIGRATING on the source, every key of the slot moved with
    MIGRATE (:meth:`begin`); then the slot given to the target on every master (:meth:`finish`)."""

    def __init__(self, cluster: EmbeddedCluster, slot: int) -> None:
        self.cluster, self.slot = cluster, slot
        self.source = cluster.master_of_slot(slot)
        others = [n for n in cluster.nodes if n.role == "master" and n.port != self.source.port]
        self.target, self.third = others

    def begin(self) -> list[bytes]:
        """The slot half-migrated, all its keys on the target; returns the keys moved."""
        slot, source, target = self.slot, self.source, self.target
        with redis.Redis.from_url(source.url) as src, redis.Redis.from_url(target.url) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            keys: list[bytes] = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000)
            src.migrate("127.0.0.1", target.port, keys, 0, 5000)
            assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
        return keys

    def migrating(self) -> bool:
        """Whether the source still says the slot is migrating to the target."""
        with redis.Redis.from_url(self.source.url) as src:
            nodes = src.execute_command("CLUSTER", "NODES").decode()
        return f"[{self.slot}->-{self.target.node_id}]" in nodes

    def finish(self) -> None:
        for node in self.cluster.nodes:
            if node.role == "master":
                with redis.Redis.from_url(node.url) as each:
                    each.execute_command(
                        "CLUSTER", "SETSLOT", self.slot, "NODE", self.target.node_id
                    )
        self.cluster.wait_ready()


async def test_a_slot_migrated_under_a_running_consumer_is_waited_out(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    migration = Migration(replicated, slot_of(replicated_stream))
    load = Load(migration.third.url, replicated_stream)

    def migrate() -> None:
        assert replicated_stream.encode() in migration.begin()
        migration.finish()

    await run_under_load(load, migrate)
    assert replicated.master_of_slot(migration.slot).port == migration.target.port


def same_slot(stream: str) -> str:
    """Another stream name whose keys share ``stream``'s slot."""
    slot = slot_of(stream)
    return next(name for n in itertools.count() if slot_of(name := f"{stream}-{n}") == slot)


async def test_a_slot_being_migrated_is_served_without_waiting_then_moved(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    """Mid-migration the old master answers ASK for the keys it no longer holds: every
    operation asks the target (ASKING) and completes while the slot is still migrating."""
    migration = Migration(replicated, slot_of(replicated_stream))
    url, doomed = migration.third.url, same_slot(replicated_stream)
    mq, other = queue(url, replicated_stream), queue(url, doomed, consumer="c2")
    handled = ok_and_poison(mq)

    async with mq, other, mq.running():
        published = await mq.publish_many("ok", range(10))
        await other.publish("ok", 0)
        await wait_for(lambda: set(published) <= set(handled), what="handled before")
        await mq.stop_message(published[0])  # handled: only the stopped hash has it
        moved = await anyio.to_thread.run_sync(migration.begin)
        names = (replicated_stream, doomed, Keys(replicated_stream).stopped)
        assert {name.encode() for name in names} <= set(moved)
        with anyio.fail_after(15):  # nothing waits for the end of the migration
            published.append(await mq.publish("ok", 10))
            published += await mq.publish_many("ok", range(11, 20))
            published += await anyio.to_thread.run_sync(publish_sync, url, replicated_stream)
            await mq.publish("poison", 0)
            await wait_for(lambda: set(published) <= set(handled), what="handled during")
            await wait_for(lambda: mq.stats().get("dead_lettered") == 1, what="a dead letter")
            await mq.stop_message(published[-1])  # a script on two keys, both moved
            await mq.resume_message(published[-1])
            assert len(await mq.replay_dead_letter()) == 1
            await wait_for(lambda: mq.stats().get("dead_lettered") == 2, what="replayed")
            mq.set_cleanup_policy(CleanupPolicy(min_retention=0, max_stream_length=0))
            await mq.cleanup()
            assert await anyio.to_thread.run_sync(migration.migrating)
        # Redis Cluster's rule: keys on neither node (the doomed topic's own keys, never
        # made) fail a command on several keys with TRYAGAIN until the migration ends;
        # terminate_topic rides that out (ride_through) and completes after it
        terminated = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(terminate, other, terminated)
            await anyio.sleep(0.5)
            assert not terminated.is_set(), "terminated while its keys were on no node"
            await anyio.to_thread.run_sync(migration.finish)
        assert terminated.is_set()
        published += await mq.publish_many("ok", range(20, 30))  # MOVED, followed
        await wait_for(lambda: set(published) <= set(handled), what="handled after")
        assert mq._deployment.node_of(replicated_stream) == f"127.0.0.1:{migration.target.port}"
        # a handler's ack is sent after it returns (coalesced): wait for it, do not race it
        await wait_for(acknowledged_all(mq), what="every handled entry acknowledged")
        assert (await other.topic_info()).exists is False
        assert not mq.done.is_set(), f"consumer stopped: {mq.stop_reason}"


async def terminate(mq: MessageQueue, terminated: anyio.Event) -> None:
    with anyio.fail_after(20):
        await mq.terminate_topic()
    terminated.set()


def acknowledged_all(mq: MessageQueue) -> Callable[[], Awaitable[bool]]:
    """A predicate for :func:`wait_for`: nothing of ``mq``'s topic is pending."""

    async def nothing_pending() -> bool:
        return (await mq.topic_info()).pending == 0

    return nothing_pending


def publish_sync(url: str, stream: str) -> list[str]:
    """Blocking clients mid-migration: the Publisher (hand-packed), a plain command."""
    with Publisher(url, stream=stream) as publisher:
        ids = [publisher.publish("ok", 100), *publisher.publish_many("ok", range(101, 105))]
    with connect_sync(url).client_for(stream, owner=True) as client:
        assert client.xrange(stream, ids[0], ids[0])[0][0].decode() == ids[0]
    return ids


async def test_a_queues_client_asked_about_a_key_of_another_slot_says_so(
    streamq_cluster_url: str, cluster_stream: str
) -> None:
    """``mq.client`` serves its stream's slot. A command on a key of another slot (a
    partition stream of the topic, say) is answered MOVED by that slot's master every time:
    it fails at once naming both, instead of passing for a cluster reconfiguring (which
    callers would wait out in vain)."""
    with redis.Redis.from_url(streamq_cluster_url) as node:
        table = SlotTable()
        table.load(node.execute_command("CLUSTER", "SLOTS"), ("127.0.0.1", 0))
    mine = table.owner(slot_of(cluster_stream))
    other = next(key for key in (f"other-{i}" for i in itertools.count())
                 if table.owner(slot_of(key)) != mine)  # fmt: skip
    mq = queue(streamq_cluster_url, cluster_stream)
    async with mq:
        with pytest.raises(
            ConfigError, match=f"'{other}'.*slot {slot_of(other)}.*{cluster_stream}"
        ):
            await mq.client.xlen(other)
        with pytest.raises(ConfigError, match=f"'{other}' is on slot"):
            await mq.client.eval("return 1", 1, other)  # a script: its first key named
        assert await mq.client.xlen(cluster_stream) == 0  # its own keys: as before
