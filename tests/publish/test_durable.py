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
