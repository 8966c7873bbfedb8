"""Poison messages, Reject, malformed entries and unknown types end in the dead-letter
stream with a reason; nothing is silently dropped and the stream never gets stuck."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import ConfigError, Message, MessageQueue, Reject, RetryPolicy, StreamId
from streamq.wire.keys import Keys
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


class Email(BaseModel):
    to: str


async def dead_count(mq: MessageQueue) -> int:
    return (await mq.topic_info()).dead_letters


async def run_until_dead(mq: MessageQueue, n: int, timeout: float = 10.0) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await wait_for(lambda: _at_least(mq, n), timeout, what=f"{n} dead letters")
        await mq.stop()


async def _at_least(mq: MessageQueue, n: int) -> bool:
    return await dead_count(mq) >= n


async def test_poison_message_dead_lettered_after_exactly_max_deliveries(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(
        retry=RetryPolicy(attempts=2, backoff=0.0, jitter=0.0, max_deliveries=3),
        claim_idle=0.2, claim_interval=0.05,
    )  # fmt: skip
    calls: list[int] = []
    broken = True

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        calls.append(msg.delivery_count)
        if broken:
            raise ValueError(f"smtp down for {msg.data.to}")

    async with mq:
        original = await mq.publish("email", Email(to="a@b.c"), meta={"k": "v"})
        await run_until_dead(mq, 1)
        assert calls == [1, 1, 2, 2, 3, 3], "2 attempts on each of 3 deliveries"
        (letter,) = await mq.dead_letters()
        assert letter.original_id == original
        assert (letter.type, letter.data, letter.meta) == ("email", '{"to":"a@b.c"}', '{"k":"v"}')
        assert (letter.group, letter.consumer, letter.attempts) == ("g", "c1", 3)
        assert "ValueError: smtp down for a@b.c" in letter.error
        assert await pending_count(client, mq.stream, "g") == 0, "dead letter must be acked"

    # fix the handler, replay: handled once, with a new ID and a note of the original
    broken = False
    calls.clear()
    again = make_queue(consumer="c1")
    handled: list[Message[Email]] = []

    @again.handler("email")
    async def fixed(msg: Message[Email]) -> None:
        handled.append(msg)

    async with again:
        (new_id,) = await again.replay_dead_letter(letter.id)
        assert new_id != original
        assert await dead_count(again) == 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(again.run)
            await wait_for(lambda: len(handled) == 1)
            await again.stop()
    assert handled[0].data == Email(to="a@b.c")
    assert handled[0].meta == {"k": "v", "replayed_from": original}


async def test_reject_dead_letters_at_once(make_queue: QueueFactory) -> None:
    mq = make_queue()
    calls = 0

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        nonlocal calls
        calls += 1
        raise Reject("address is on the blocklist")

    async with mq:
        await mq.publish("email", {"to": "spam@x"})
        await run_until_dead(mq, 1)
        (letter,) = await mq.dead_letters()
    assert calls == 1
    assert letter.error == "rejected: address is on the blocklist"


MALFORMED = [
    ({"data": '{"to":"a@b.c"}'}, "no 'type' field"),
    ({"type": "bad type!", "data": "{}"}, "invalid message type"),
    ({"type": "email", "data": "{not json"}, "invalid payload"),
    ({"type": "email", "data": '{"to": 5}'}, "to: Input should be a valid string"),
    ({"type": "email"}, "no 'data' field"),
    ({"type": "email", "data": '{"to":"a@b"}', "meta": "[1]"}, "'meta' must be a JSON object"),
]


async def test_malformed_entries_dead_lettered_with_reason_and_stream_goes_on(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    good: list[str] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        good.append(msg.data.to)

    async with mq:
        await mq.publish("email", {"to": "before@x"})
        bad_ids = [await client.xadd(mq.stream, fields) for fields, _ in MALFORMED]
        await mq.publish("email", {"to": "after@x"})
        await run_until_dead(mq, len(MALFORMED))
        # several workers dead-letter concurrently: order in the DLQ is not stream order
        letters = sorted(await mq.dead_letters(), key=lambda d: StreamId.parse(d.original_id))
        assert good == ["before@x", "after@x"]
        assert [letter.original_id for letter in letters] == [i.decode() for i in bad_ids]
        for letter, (_, reason) in zip(letters, MALFORMED, strict=True):
            assert reason in letter.error, f"{letter.error!r} should mention {reason!r}"
        assert await pending_count(client, mq.stream, "g") == 0


async def test_foreign_fields_are_named_in_the_dead_letter(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    mq.handler("email")(lambda msg: None)
    async with mq:
        await client.xadd(mq.stream, {"payload": "x", "version": "2"})
        await run_until_dead(mq, 1)
        (letter,) = await mq.dead_letters()
    assert "other fields not kept: payload, version" in letter.error


async def test_unknown_type_waits_for_a_handler_then_dead_letters(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(
        retry=RetryPolicy(unknown_type_deliveries=3), claim_idle=0.2, claim_interval=0.05
    )
    mq.handler("email")(lambda msg: None)
    async with mq:
        await mq.publish("sms", {"to": "+100"})
        await run_until_dead(mq, 1)
        (letter,) = await mq.dead_letters()
    assert "no handler for type 'sms' after 3 deliveries" in letter.error


async def test_unknown_type_is_taken_by_a_consumer_that_has_the_handler(
    make_queue: QueueFactory,
) -> None:
    emails_only = make_queue(consumer="emails", claim_idle=0.3, claim_interval=0.05)
    emails_only.handler("email")(lambda msg: None)
    sms_sent: list[str] = []
    both = make_queue(consumer="both", claim_idle=0.3, claim_interval=0.05)
    both.handler("email")(lambda msg: None)
    both.handler("sms")(lambda msg: sms_sent.append(msg.id))
    async with emails_only, both:
        sms_id = await emails_only.publish("sms", {"to": "+100"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(emails_only.run)
            await wait_for(lambda: emails_only.stats().get("received") == 1,
                           what="emails_only to read the sms first (it leaves it pending)")  # fmt: skip
            tg.start_soon(both.run)
            await wait_for(lambda: sms_sent == [sms_id], what="the sms to reach 'both'")
            await emails_only.stop()
            await both.stop()
        assert await dead_count(both) == 0


async def test_deliveries_to_consumers_without_the_handler_do_not_use_up_max_deliveries(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    policy = RetryPolicy(max_deliveries=3)
    emails_only = make_queue(consumer="emails", retry=policy, claim_idle=0.1, claim_interval=0.05)
    emails_only.handler("email")(lambda msg: None)
    async with emails_only:
        sms_id = await emails_only.publish("sms", {"to": "+100"})
        unrouted = Keys(emails_only.stream).unrouted

        async def five_deliveries_without_handler() -> bool:
            return int(await client.hget(unrouted, f"{sms_id}:g") or 0) >= 5

        async with anyio.create_task_group() as tg:
            tg.start_soon(emails_only.run)
            await wait_for(five_deliveries_without_handler, what="5 unrouted deliveries recorded")
            await emails_only.stop()
    sms_sent: list[str] = []
    both = make_queue(consumer="both", retry=policy, claim_idle=0.1, claim_interval=0.05)
    both.handler("sms")(lambda msg: sms_sent.append(msg.id))
    async with both, anyio.create_task_group() as tg:
        tg.start_soon(both.run)
        await wait_for(lambda: sms_sent == [sms_id], what="the sms handled, not dead-lettered")
        await both.stop()
        assert await dead_count(both) == 0
    assert await client.hget(unrouted, f"{sms_id}:g") is None, "the record outlived the entry"


async def test_purge_and_replay_all(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    mq = make_queue()

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        raise Reject("no")

    async with mq:
        await mq.publish_many("email", [{"to": f"{i}@x"} for i in range(3)])
        await run_until_dead(mq, 3)
        new_ids = await mq.replay_dead_letter()
        assert len(new_ids) == 3 and await dead_count(mq) == 0
        assert await client.xlen(mq.stream) == 6
        await client.xadd(Keys(mq.stream).dead_letters, {"type": "x", "data": "1"})
        assert await mq.purge_dead_letters() == 1
        assert await dead_count(mq) == 0


async def test_replay_all_replays_a_snapshot_each_letter_once(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """A consumer that keeps dead-lettering what is replayed must not make replay-all loop:
    the letters present when it started are replayed once each, the new ones stay."""
    mq = make_queue()

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        raise Reject("still broken")

    n = 20
    async with mq:
        await mq.publish_many("email", [{"to": f"{i}@x"} for i in range(n)])
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: _at_least(mq, n), what=f"{n} dead letters")
            with anyio.fail_after(20):
                new_ids = await mq.replay_dead_letter()
            assert len(new_ids) == len(set(new_ids)) == n
            await wait_for(lambda: _at_least(mq, n), what="the replayed letters dead again")
            await mq.stop()
        assert await client.xlen(mq.stream) == 2 * n
        assert await dead_count(mq) == n


async def test_concurrent_replay_all_publishes_each_letter_once(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    dlq = Keys(mq.stream).dead_letters
    for i in range(50):
        await client.xadd(dlq, {"original_id": f"{i + 1}-0", "type": "job", "data": str(i)})
    results: list[list[str]] = []

    async def replay() -> None:
        results.append(await mq.dead_letter_queue.replay_all())

    async with mq, anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(replay)
    assert sum(len(r) for r in results) == 50
    assert await client.xlen(mq.stream) == 50
    assert await client.xlen(dlq) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("count", [0, -1, 2.5, True])
async def test_listing_dead_letters_with_a_count_below_one_is_a_config_error(
    make_queue: QueueFactory, count: object
) -> None:
    async with make_queue() as mq:
        with pytest.raises(ConfigError, match=f"count must be an integer >= 1, got {count!r}"):
            await mq.dead_letters(count=count)  # type: ignore[arg-type]
