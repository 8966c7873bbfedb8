"""Durable publishing on a master with one replica (an embedded cluster of one master and one
replica): ``replicas=1`` returns once the replica has the entry; ``fsync=True`` once the
replica has also written it to its append-only file (WAITAOF), which a replica that never
fsyncs (``appendfsync no``) cannot confirm."""

from __future__ import annotations

import os

import pytest
import redis

from streamq import EmbeddedCluster, MessageQueue, NotReplicatedError

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# what a master runs besides its clients' commands: its replica's acks and pings, and the
# INFO that counts the commands
REPLICA_LINK = {"replconf", "ping", "info"}


def queue(pair: EmbeddedCluster) -> MessageQueue:
    return MessageQueue(pair.url, stream=f"test-{os.urandom(6).hex()}", group="g")


@pytest.mark.parametrize("fsync", [False, True], ids=["written", "fsynced"])
async def test_a_durable_publish_returns_once_the_replica_has_the_entry(
    pair: EmbeddedCluster, replica: redis.Redis, fsync: bool
) -> None:
    """With ``fsync`` the publish also waits for the replica's append-only file (which
    this replica writes at every command: ``appendfsync always``)."""
    if fsync:
        replica.config_set("appendfsync", "always")
    async with queue(pair) as mq:
        entry_id = await mq.publish("job", {"n": 1}, replicas=1, timeout=5, fsync=fsync)
        assert [i.decode() for i, _ in replica.xrange(mq.stream)] == [entry_id]


async def test_fsync_on_a_replica_that_never_fsyncs_is_not_confirmed(
    pair: EmbeddedCluster, replica: redis.Redis
) -> None:
    replica.config_set("appendfsync", "no")
    async with queue(pair) as mq:
        with pytest.raises(NotReplicatedError) as failure:
            await mq.publish("job", {"n": 1}, replicas=1, timeout=0.2, fsync=True)
        assert "append-only file of 0 of 1 replica" in str(failure.value)
        assert failure.value.replicas == 0
        assert await mq.client.xlen(mq.stream) == 1, "the entry is added all the same"


def calls(node: redis.Redis) -> dict[str, int]:
    """How often ``node`` ran each command, by name."""
    stats = node.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


async def test_a_durable_publish_costs_its_master_one_xadd_and_one_wait(
    pair: EmbeddedCluster,
) -> None:
    """Nothing more per publish (no script, no second WAIT): the marker that makes a send
    after an unknown outcome safe goes with the XADD, and is looked for only by that send."""
    (master,) = [node for node in pair.nodes if node.role == "master"]
    async with queue(pair) as mq:
        await mq.publish("job", 0, replicas=1, timeout=5)  # its stream made, its topic read
        with redis.Redis.from_url(master.url) as node:
            before = calls(node)
            for n in range(20):
                await mq.publish("job", n, replicas=1, timeout=5)
            after = calls(node)
    ran = {name: count - before.get(name, 0) for name, count in after.items()}
    ours = {name: count for name, count in ran.items() if count and name not in REPLICA_LINK}
    assert ours == {"xadd": 20, "wait": 20}
