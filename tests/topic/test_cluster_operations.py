"""Topic operations on a cluster whose master fails: each rides the failover out (as a
publish does) instead of raising ServerUnavailableError while no node serves the slot."""

from __future__ import annotations

import anyio
import pytest
import redis

from streamq import CleanupPolicy, EmbeddedCluster
from streamq.server.cluster_nodes import ClusterNode
from streamq.wire.keys import Keys
from streamq.wire.slots import slot_of
from tests.helpers.queues import queue
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_topic_operations_wait_out_a_master_failover(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    victim = replicated.master_of_slot(slot_of(replicated_stream))
    survivor = next(n for n in replicated.nodes if n.role == "master" and n.port != victim.port)
    mq = queue(survivor.url, replicated_stream)
    async with mq:
        ids = await mq.publish_many("ok", range(3))
        await mq.stop_message(ids[0])
        # a durable publish after them: the replica has all of the above (one ordered stream)
        ids.append(await mq.publish("ok", 3, replicas=1, timeout=5))
        replicated.kill_node(victim.port)
        try:
            with anyio.fail_after(40):  # the old code raised ServerUnavailableError at once
                assert await mq.stopped_messages() == [ids[0]]
                assert await mq.resume_message(ids[0]) == 0  # nobody had read it
                await mq.stop_message(ids[1])
                info = await mq.topic_info()
                assert (info.length, info.stopped_ids, info.pending) == (4, [ids[1]], 0)
                await mq.seek(ids[2])
                assert (await mq.topic_info()).group("g").last_delivered_id == ids[2]
                assert await mq.dead_letters() == []
                assert await mq.purge_dead_letters() == 0
                mq.set_cleanup_policy(CleanupPolicy(min_retention=0, max_stream_length=0))
                assert await mq.cleanup() == 2  # below the seek point, but the stopped one
                assert (await mq.topic_info()).length == 2
                assert await mq.stopped_messages() == [ids[1]]
            assert replicated.master_of_slot(slot_of(replicated_stream)).port != victim.port
        finally:
            await anyio.to_thread.run_sync(replicated.restart_node, victim.port)


async def test_terminate_waits_out_a_master_failover(
    replicated: EmbeddedCluster, replicated_stream: str
) -> None:
    victim = replicated.master_of_slot(slot_of(replicated_stream))
    survivor = next(n for n in replicated.nodes if n.role == "master" and n.port != victim.port)
    mq = queue(survivor.url, replicated_stream, partitions=6)
    async with mq:
        await mq.publish("ok", 0, key="k", replicas=1, timeout=5)
        record = Keys(replicated_stream).partitions  # written by open(), on the victim
        await wait_for(lambda: on_replica(replicated, victim, record), what="record replicated")
        replicated.kill_node(victim.port)
        try:
            with anyio.fail_after(40):
                await mq.terminate_topic()
                assert (await mq.topic_info()).exists is False
        finally:
            await anyio.to_thread.run_sync(replicated.restart_node, victim.port)


def on_replica(cluster: EmbeddedCluster, master: ClusterNode, key: str) -> bool:
    """Whether a replica of ``master`` has ``key`` (replication is asynchronous)."""
    (replica,) = (n for n in cluster.nodes if n.master_id == master.node_id)
    with redis.Redis.from_url(replica.url) as node:
        node.execute_command("READONLY")
        return bool(node.exists(key))
