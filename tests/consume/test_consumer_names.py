"""One live process per consumer name in a group: a queue that consumes claims its name
when it opens (``streamq:{<stream>}:alive:<len(group)>:<group>:<consumer>``, on the topic's
slot), renews the claim while it runs and gives it back when it closes. A second queue under a
name a live queue holds is refused (shared, ordered, partitioned; on a node and on a
cluster); a name whose holder died is free again once its claim runs out; fan-out queues
have no group and claim nothing."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, ConsumerNameTakenError, Message, MessageQueue
from streamq.consume import name_claim
from streamq.wire.keys import Keys
from tests.helpers.queues import queue
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

MODES: dict[str, dict[str, Any]] = {
    "shared": {},
    "ordered": {"ordered": True},
    "partitioned": {"partitions": 2},
    "ordered-partitioned": {"partitions": 2, "ordered": True},
}


def consuming(where: str, topic: str, **options: Any) -> tuple[MessageQueue, list[int]]:
    """A queue ``worker-0`` of group ``g`` on ``topic`` (``options`` add to or replace these)
    whose ``job`` handler keeps what it handles (in the list returned)."""
    mq = queue(where, topic, **{"consumer": "worker-0", **options})
    handled: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handled.append(msg.data)

    return mq, handled


@pytest.mark.parametrize("mode", MODES)
async def test_a_name_a_running_queue_holds_is_refused(where: str, topic: str, mode: str) -> None:
    first, handled = consuming(where, topic, **MODES[mode])
    second, _ = consuming(where, topic, **MODES[mode])
    async with first.running():
        started = time.monotonic()
        with pytest.raises(ConsumerNameTakenError) as refused:
            await second.open()
        assert time.monotonic() - started < name_claim.CLAIM_TTL, "a live holder is seen at once"
        await first.publish("job", 1)
        await wait_for(lambda: handled == [1], what="the first queue consuming on")
    error = refused.value
    assert isinstance(error, ConfigError)
    assert (error.consumer, error.group, error.stream) == ("worker-0", "g", topic)
    text = str(error)
    assert "'worker-0'" in text and "'g'" in text and "consumer=" in text and "--name" in text
    assert "another live process" in text
    await second.aclose()


async def test_a_closed_queue_gives_its_name_back_at_once(where: str, topic: str) -> None:
    first, _ = consuming(where, topic)
    async with first.running():
        pass
    second, handled = consuming(where, topic)
    started = time.monotonic()
    async with second.running():
        assert time.monotonic() - started < 1.0, "the name was not given back on close"
        await second.publish("job", 2)
        await wait_for(lambda: handled == [2], what="the second queue consuming")


async def test_the_name_of_a_holder_that_died_is_taken_once_its_claim_runs_out(
    redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    """A claim nobody renews (its process was SIGKILLed) is waited out, not refused: a
    restarted worker gets its stable name back."""
    key = Keys(stream).consumer_claim("g", "worker-0")
    ttl_ms = int(name_claim.CLAIM_TTL * 1000)
    await client.set(key, "4242@gone-host#0badf00d 7", px=ttl_ms)
    mq, handled = consuming(redis_url, stream)
    started = time.monotonic()
    async with mq.running():
        waited = time.monotonic() - started
        assert name_claim.RENEW_EVERY < waited < name_claim.CLAIM_TTL + 2.0, waited
        assert (await client.get(key)).decode().startswith(name_claim.token_prefix())
        await mq.publish("job", 3)
        await wait_for(lambda: handled == [3], what="consuming under the recovered name")
    assert await client.get(key) is None, "the claim was not given back on close"


async def test_a_claim_is_renewed_while_the_queue_runs(
    redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    mq, _ = consuming(redis_url, stream)
    key = Keys(stream).consumer_claim("g", "worker-0")
    async with mq.running():
        await anyio.sleep(name_claim.CLAIM_TTL + name_claim.RENEW_EVERY)
        assert await client.get(key) is not None, "the claim ran out while its queue ran"
        assert 0 < await client.pttl(key) <= name_claim.CLAIM_TTL * 1000


async def test_a_claim_without_expiry_is_replaced_with_a_warning(
    redis_url: str, stream: str, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    key = Keys(stream).consumer_claim("g", "worker-0")
    await client.set(key, "not a claim streamq wrote")  # no expiry: it would never run out
    mq, _ = consuming(redis_url, stream)
    with anyio.fail_after(name_claim.CLAIM_TTL + 5):
        async with mq:
            assert (await client.get(key)).decode().startswith(name_claim.token_prefix())
    assert any(key in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


async def test_queues_that_do_not_consume_claim_no_name(redis_url: str, stream: str) -> None:
    """Publishing queues (no handler) and fan-out subscribers (no group: every instance
    reads every entry, nothing is shared under a name) open beside a running consumer of
    the same name."""
    running, _ = consuming(redis_url, stream)
    publisher = queue(redis_url, stream, consumer="worker-0")
    fanout, seen = consuming(redis_url, stream, group=None)
    async with running.running(), publisher, fanout.running():
        await publisher.publish("job", 4)
        await wait_for(lambda: seen == [4], what="the fan-out subscriber reading")


async def test_a_consumer_whose_name_was_taken_while_it_stalled_stops(
    redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    """Another process took the name while this one did not renew it (a stall longer than
    the claim): the next renewal finds it and the consumer stops, leaving the claim."""
    mq, _ = consuming(redis_url, stream)
    key = Keys(stream).consumer_claim("g", "worker-0")
    errors: list[ConsumerNameTakenError] = []

    async def run() -> None:
        try:
            await mq.run()
        except ConsumerNameTakenError as e:
            errors.append(e)

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for(lambda: mq.stats() != {}, what="the consumer running")
        await client.set(key, "4242@other-host#0badf00d 1", px=int(name_claim.CLAIM_TTL * 1000))
        with anyio.fail_after(name_claim.RENEW_EVERY + 10):
            await mq.done.wait()
    assert mq.stop_reason == name_claim.LOST_REASON
    assert errors and errors[0].consumer == "worker-0"
    assert await client.get(key) == b"4242@other-host#0badf00d 1", "another's claim was deleted"


async def test_names_that_join_to_the_same_text_are_claimed_apart(
    redis_url: str, stream: str
) -> None:
    """Group ``a:b`` with consumer ``c`` and group ``a`` with consumer ``b:c`` are two names:
    each claim is its own key, so neither queue is refused for the other."""
    assert Keys(stream).consumer_claim("a:b", "c") != Keys(stream).consumer_claim("a", "b:c")
    first, _ = consuming(redis_url, stream, group="a:b", consumer="c")
    second, handled = consuming(redis_url, stream, group="a", consumer="b:c")
    async with first.running(), second.running():
        await second.publish("job", 5)
        await wait_for(lambda: 5 in handled, what="the second group consuming beside the first")
