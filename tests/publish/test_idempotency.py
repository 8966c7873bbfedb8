"""Idempotent publishing (``publish(..., idempotency_key=)``) and the probe of the server's
newer stream commands. On Valkey (the default test server) the fallback script runs; on
Redis >= 8.6 (``make test-redis8``) the server's own ``XADD ... IDMP``: the same tests hold."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import MessageFormatError, MessageQueue, NotReplicatedError
from streamq.publish import idempotency
from streamq.topic.partitions import partition_for_key
from streamq.wire.features import Features, probe
from tests.helpers.queues import QueueFactory

pytestmark = pytest.mark.anyio


async def expected_features(client: aioredis.Redis) -> Features:
    """What the server should have, from its name and version."""
    info = await client.info("server")
    if "valkey_version" in info or info.get("server_name") == "valkey":
        return Features()  # Valkey 9.1 has neither command (yet)
    version = tuple(int(part) for part in str(info["redis_version"]).split(".")[:2])
    return Features(xadd_idmp=version >= (8, 6), xreadgroup_claim=version >= (8, 4))


async def test_the_probe_agrees_with_the_servers_version(client: aioredis.Redis) -> None:
    assert await probe(client) == await expected_features(client)


async def test_a_key_used_again_returns_the_first_entry_and_adds_nothing(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    first = await mq.publish("job", {"n": 1}, idempotency_key="order-42")
    again = await mq.publish("job", {"n": 1}, idempotency_key="order-42")
    other = await mq.publish("job", {"n": 2}, idempotency_key="order-43")
    assert again == first != other
    assert [i.decode() for i, _ in await client.xrange(mq.stream)] == [first, other]


async def test_a_retry_finds_its_key_after_hundreds_of_other_publishes(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """On Redis >= 8.6 the server remembers the last IDMP-MAXSIZE (100) keys per producer:
    with one producer for every publish, a retry after 100 others added the entry again."""
    mq = make_queue()
    first = await mq.publish("job", {"n": 0}, idempotency_key="order-0")
    for n in range(1, 400):
        await mq.publish("job", {"n": n}, idempotency_key=f"order-{n}")
    assert await mq.publish("job", {"n": 0}, idempotency_key="order-0") == first
    assert await client.xlen(mq.stream) == 400


async def test_concurrent_retries_of_one_key_add_one_entry(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    ids: list[str] = []

    async def publish() -> None:
        ids.append(await mq.publish("job", {"n": 1}, idempotency_key="once"))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(publish)
    assert len(set(ids)) == 1 and len(ids) == 20
    assert await client.xlen(mq.stream) == 1


async def test_a_durable_retry_reports_the_first_entry(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """The session server has no replica: each durable publish reports NotReplicatedError
    with the entry's ID, and the retry names the same entry."""
    mq = make_queue()
    with pytest.raises(NotReplicatedError) as first:
        await mq.publish("job", {}, replicas=1, timeout=0.05, idempotency_key="k")
    with pytest.raises(NotReplicatedError) as retry:
        await mq.publish("job", {}, replicas=1, timeout=0.05, idempotency_key="k")
    assert retry.value.entry_id == first.value.entry_id
    assert await client.xlen(mq.stream) == 1


async def test_the_fallback_remembers_a_key_for_its_window_only(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    entry_id = await mq.publish("job", {}, idempotency_key="k")
    record = idempotency.record_key(mq.stream, "k")
    if (await probe(client)).xadd_idmp:
        assert not await client.exists(record), "the server's IDMP needs no record of ours"
        return
    assert (await client.get(record)).decode() == entry_id
    assert 0 < await client.pttl(record) <= idempotency.WINDOW * 1000


@pytest.mark.parametrize("key", ["", 42, b"bytes"])
async def test_a_key_that_is_not_a_non_empty_string_is_refused(
    make_queue: QueueFactory, client: aioredis.Redis, key: object
) -> None:
    mq = make_queue()
    with pytest.raises(MessageFormatError, match="idempotency_key must be a non-empty string"):
        await mq.publish("job", {}, idempotency_key=key)  # type: ignore[arg-type]
    assert await client.xlen(mq.stream) == 0


async def test_on_a_partitioned_topic_a_key_without_a_message_key_stays_in_one_partition(
    redis_url: str, stream: str
) -> None:
    """Without ``key=`` publishes take the partitions in turn; a retry under the same
    idempotency key must go where the first went, or the partition it lands on adds it
    again. The idempotency key picks the partition then."""
    async with MessageQueue(redis_url, stream=stream, partitions=4) as mq:
        first = await mq.publish("job", 1, idempotency_key="order-42")
        retries = [await mq.publish("job", 1, idempotency_key="order-42") for _ in range(4)]
        info = await mq.topic_info()
        await mq.terminate_topic()
    assert retries == [first] * 4
    assert info.length == 1, f"{info.length} entries for one idempotency key"
    assert first.startswith(f"{partition_for_key('order-42', 4)}:")
