"""``streamq forget STREAM GROUP CONSUMER``: a consumer name that is gone for good is
deleted from its group on every partition and from ordered mode's membership; a live one,
or one still owning pending entries, is refused and kept."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue
from streamq.wire.keys import Keys
from streamq.wire.ownership import members_key
from streamq.wire.partition_names import partition_for_key
from tests.conftest import QueueFactory, wait_for
from tests.helpers.cli import streamq
from tests.helpers.clients import sync_client

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


async def shell(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: streamq(*args, url=url))


def ordered(make_queue: QueueFactory, consumer: str) -> tuple[MessageQueue, list[int]]:
    mq = make_queue(partitions=2, ordered=True, ownership_lease=2.0, consumer=consumer)
    handled: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[Any]) -> None:
        handled.append(msg.data)

    return mq, handled


def consumers_of(url: str, mq: MessageQueue) -> list[set[str]]:
    """The consumer names of group ``g`` on each partition of ``mq``'s topic."""
    found = []
    for stream in mq.streams:
        with sync_client(url, stream) as r:
            found.append({row["name"].decode() for row in r.xinfo_consumers(stream, "g")})
    return found


async def test_a_consumer_gone_for_good_is_forgotten_on_every_partition(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis
) -> None:
    gone, handled = ordered(make_queue, "gone")
    keys = [f"k{n}" for n in range(16)]
    assert {partition_for_key(key, 2) for key in keys} == {0, 1}, "keys of both partitions"
    async with gone.running():
        for n, key in enumerate(keys):
            await gone.publish("job", n, key=key)
        await wait_for(lambda: len(handled) == 16, what="the consumer handling on both partitions")
    members = members_key(gone.stream, "g")
    assert await client.hexists(members, "gone"), "an ordered member's record stays"
    assert all("gone" in names for names in consumers_of(redis_url, gone))
    waiting = Keys(gone.stream).waiting("g")  # flow-control reports, as a killed one leaves
    report = '{"at": 1, "pause": 0, "rate_limit": 3, "throttle": 0}'
    await client.hset(waiting, mapping={"gone": report, "other": report})

    done = await shell("forget", gone.stream, "g", "gone", url=redis_url)
    assert done.returncode == 0, done.stderr
    assert "forgot consumer 'gone'" in done.stdout and "2 partitions" in done.stdout
    assert all("gone" not in names for names in consumers_of(redis_url, gone))
    assert not await client.hexists(members, "gone")
    assert await client.hkeys(waiting) == [b"other"], "the forgotten consumer's report stays"

    again = await shell("forget", gone.stream, "g", "gone", url=redis_url)
    assert again.returncode == 1 and "no consumer 'gone'" in again.stderr, again


async def test_a_live_consumer_is_refused_and_kept(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis
) -> None:
    live, handled = ordered(make_queue, "live")
    async with live.running():
        await live.publish("job", 1, key="a")
        await wait_for(lambda: handled == [1], what="the consumer running")
        refused = await shell("forget", live.stream, "g", "live", url=redis_url)
        assert refused.returncode == 1, refused
        assert "'live'" in refused.stderr and "is live" in refused.stderr, refused.stderr
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        assert await client.hexists(members_key(live.stream, "g"), "live")
        await live.publish("job", 2, key="a")
        await wait_for(lambda: handled == [1, 2], what="the consumer going on")


async def test_a_live_membership_record_without_a_claim_is_refused(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis
) -> None:
    mq, _ = ordered(make_queue, "other")
    async with mq:
        await mq.publish("job", 1, key="a")
    for stream in mq.streams:
        with sync_client(redis_url, stream) as r:
            r.xgroup_createconsumer(stream, "g", "member")
    seconds, _ = await client.time()
    await client.hset(members_key(mq.stream, "g"), "member", f"{(seconds + 60) * 1000}|0")
    refused = await shell("forget", mq.stream, "g", "member", url=redis_url)
    assert refused.returncode == 1 and "live ordered member" in refused.stderr, refused
    assert all("member" in names for names in consumers_of(redis_url, mq))


async def test_a_consumer_with_pending_entries_is_refused_and_kept(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis
) -> None:
    mq = make_queue()
    async with mq:
        await mq.publish("job", 1)
    await client.xreadgroup("g", "stuck", {mq.stream: ">"}, count=1)  # read, never acked
    refused = await shell("forget", mq.stream, "g", "stuck", url=redis_url)
    assert refused.returncode == 1 and "1 pending" in refused.stderr, refused
    assert "streamq pending" in refused.stderr, refused.stderr
    assert (await client.xpending(mq.stream, "g"))["pending"] == 1
    assert {row["name"] for row in await client.xinfo_consumers(mq.stream, "g")} == {b"stuck"}
