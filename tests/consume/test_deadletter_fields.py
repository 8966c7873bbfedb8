"""A dead letter keeps every wire field of its entry (type, data, meta, key, and ver, enc,
kid when present) in every mode, and a replay writes them back: a replayed keyed entry is
ordered with its key again, on a partitioned topic in the partition its key picks."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, PartialFailure, Reject, RetryPolicy
from streamq.wire.keys import Keys
from streamq.wire.partition_names import partition_for_key
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

ONE_DELIVERY = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)


async def _dead_letters(mq: MessageQueue, n: int) -> None:
    async def enough() -> bool:
        return (await mq.topic_info()).dead_letters >= n

    await wait_for(enough, what=f"{n} dead letters")


async def _handled_after_replay(
    make_queue: QueueFactory, letter_id: str, **options: Any
) -> Message[Any]:
    """Replay ``letter_id`` and return the message a new queue of the same consumer (the
    first has closed) is given for it."""
    again = make_queue(consumer="c1", **options)
    handled = handled_messages(again)
    async with again:
        (new_id,) = await again.replay_dead_letter(letter_id)
        async with again.running():
            await wait_for(lambda: len(handled) == 1, what="the replayed entry handled")
    (message,) = handled
    assert message.id == new_id
    return message


async def test_a_shared_consumers_letter_keeps_the_key_and_a_replay_writes_it_back(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def refuse(msg: Message[Any]) -> None:
        raise Reject("not now")

    async with mq:
        await mq.publish("job", {"n": 1}, meta={"m": "v"}, key="cust-1")
        async with mq.running():
            await _dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert letter.key == "cust-1" and letter.error == "rejected: not now"
    (_, raw), *_ = await client.xrange(Keys(mq.stream).dead_letters)
    assert raw[b"key"] == b"cust-1"
    replayed = await _handled_after_replay(make_queue, letter.id)
    assert replayed.key == "cust-1"
    assert replayed.meta == {"m": "v", "replayed_from": letter.original_id}


async def test_every_wire_field_of_a_foreign_entry_is_kept_and_written_back(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    wire = {b"type": b"job", b"data": b"{}", b"key": b"k", b"ver": b"2", b"kid": b"k1"}
    mq = make_queue()

    @mq.handler("job", version=2, upcast={1: dict})  # an entry of version 2 is this handler's
    async def refuse(msg: Message[Any]) -> None:
        raise Reject("no")

    async with mq:
        await client.xadd(mq.stream, {**wire, b"colour": b"red"})
        async with mq.running():
            await _dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
        assert "other fields not kept: colour" in letter.error, "a foreign field is named"
        (new_id,) = await mq.replay_dead_letter(letter.id)
    ((_, replayed),) = await client.xrange(mq.stream, min=new_id, max=new_id)
    assert {name: replayed[name] for name in wire} == wire
    assert b"colour" not in replayed


async def test_a_batch_handlers_letters_keep_their_keys(make_queue: QueueFactory) -> None:
    mq = make_queue(retry=ONE_DELIVERY)

    @mq.batch_handler("job", size=3, timeout=0.05)
    async def store(msgs: list[Message[Any]]) -> None:
        raise PartialFailure({m.id: "bad" for m in msgs if m.data["n"] != 1})

    async with mq:
        for n, key in enumerate(["a", "b", "c"]):
            await mq.publish("job", {"n": n}, key=key)
        async with mq.running():
            await _dead_letters(mq, 2)
        letters = await mq.dead_letters()
    assert sorted(letter.key or "" for letter in letters) == ["a", "c"]


async def test_an_ordered_poison_letter_keeps_its_key_and_its_replay_is_ordered_again(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(ordered=True, retry=ONE_DELIVERY)

    @mq.handler("job")
    async def poison(msg: Message[Any]) -> None:
        raise RuntimeError("poison")

    async with mq:
        await mq.publish("job", {"n": 0}, key="a")
        async with mq.running():
            await _dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert letter.key == "a"
    replayed = await _handled_after_replay(make_queue, letter.id, ordered=True)
    assert replayed.key == "a"


async def test_a_halted_key_skipped_by_an_operator_keeps_its_key_in_the_letter(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(ordered=True, retry=ONE_DELIVERY, on_poison="halt")

    @mq.handler("job")
    async def poison(msg: Message[Any]) -> None:
        raise RuntimeError("poison")

    async with mq:
        await mq.publish("job", {"n": 0}, key="a")
        async with mq.running():

            async def halted() -> bool:
                return len(await mq.halted_keys()) == 1

            await wait_for(halted, what="key a halted")
            assert await mq.release_halted_key("a", skip=True)
            await _dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert letter.key == "a" and "skipped by an operator" in letter.error


async def test_a_replay_on_a_partitioned_topic_goes_to_the_partition_its_key_picks(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(partitions=4, retry=ONE_DELIVERY)

    @mq.handler("job")
    async def refuse(msg: Message[Any]) -> None:
        raise Reject("no")

    keys = ["alpha", "beta", "gamma", "delta"]
    async with mq:
        for key in keys:
            await mq.publish("job", {"key": key}, key=key)
        async with mq.running():
            await _dead_letters(mq, len(keys))
        letters = await mq.dead_letters()
        new_ids = await mq.replay_dead_letter()
    assert sorted(letter.key or "" for letter in letters) == sorted(keys)
    again = make_queue(consumer="c1", partitions=4)
    handled = handled_messages(again)
    async with again, again.running():
        await wait_for(lambda: len(handled) == len(keys), what="the replayed entries")
    assert sorted(m.id for m in handled) == sorted(new_ids)
    for message in handled:
        assert message.key == message.data["key"]
        assert message.partition == partition_for_key(message.data["key"], 4)
