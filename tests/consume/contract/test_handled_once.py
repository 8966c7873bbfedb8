"""Handled once: every entry reaches a handler once, as the Message its publish made, and
a group acknowledges it; fan-out's equivalent is every instance handling every entry once.
(README.md, DESIGN.md "Semantics": at-least-once, ack after success; services.md
"Fan-out subscribers".)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue
from streamq.topic.partitions import partition_streams
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def journal(mq: MessageQueue) -> list[Message[Any]]:
    handled: list[Message[Any]] = []

    @mq.handler("job")
    async def keep(msg: Message[dict[str, int]]) -> None:
        handled.append(msg)

    return handled


async def test_every_entry_is_handled_once_as_published_and_acked(mode: Mode) -> None:
    mq = mode.queue()
    handled = journal(mq)
    async with mq:
        ids = [await mq.publish("job", {"n": n}, key=key) for n, key in enumerate(keys(12))]
        async with mq.running():
            await wait_for(lambda: len(handled) >= 12, what="12 handled")
            await wait_for(lambda: mq.stats()["handled"] == 12, what="12 counted")
        assert Counter(m.id for m in handled) == Counter(ids), "each entry once"
        await all_acked(mq)
    for n, msg in enumerate(sorted(handled, key=lambda m: m.data["n"])):
        assert (msg.id, msg.type, msg.data, msg.key) == (ids[n], "job", {"n": n}, f"key-{n}")
        assert msg.group == (mq.group or "") and msg.delivery_count == 1
        assert msg.partition == (int(ids[n].split(":")[0]) if mode.partitions > 1 else 0)


async def test_two_consumers_share_a_groups_entries_and_fanout_instances_each_get_all(
    mode: Mode,
) -> None:
    one, two = mode.queue(), mode.queue()
    seen_one, seen_two = journal(one), journal(two)
    async with one, two, one.running(), two.running():
        ids = [await one.publish("job", {"n": n}, key=key) for n, key in enumerate(keys(20))]
        if mode.grouped:  # a group shares its entries out: each to one consumer
            await wait_for(lambda: len(seen_one) + len(seen_two) >= 20, what="20 handled")
        else:  # every fan-out instance receives every entry
            await wait_for(lambda: min(len(seen_one), len(seen_two)) >= 20, what="20 each")
    if mode.grouped:
        assert Counter(m.id for m in seen_one + seen_two) == Counter(ids)
    else:
        assert Counter(m.id for m in seen_one) == Counter(ids) == Counter(m.id for m in seen_two)


async def test_pending_entries_are_handled_before_new_ones(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    mode.skip_unless("shared", "ordered", does_not="keep pending entries", where=FANOUT_DOC)
    mq = mode.queue()
    handled = journal(mq)
    async with mq:
        old = await mq.publish_many("job", [{"n": n} for n in range(3)], key="a")
        for stream in mq.streams:  # what the consumer read before it crashed
            await client_for(stream).xreadgroup("g", mq.consumer, {stream: ">"}, count=10)
        new = await mq.publish_many("job", [{"n": n} for n in range(3, 5)], key="a")
        async with mq.running():
            await wait_for(lambda: len(handled) == 5, what="5 handled")
            await all_acked(mq)
    assert [m.id for m in handled] == old + new, "pending entries first, in ID order"
    if mode.kind == "ordered":  # only a key's first pending entry could have run: the
        # later ones get their count back (docs/guides/ordering.md "Takeover")
        assert [m.delivery_count for m in handled] == [2, 1, 1, 1, 1]
    else:
        assert [m.delivery_count for m in handled] == [2, 2, 2, 1, 1]


@pytest.mark.parametrize("name", ["another", "the same"])
async def test_entries_left_pending_by_a_gone_consumer_are_handled_once_by_the_next(
    mode: Mode, client_for: Callable[[str], aioredis.Redis], name: str
) -> None:
    """Entries a gone consumer read and never acknowledged, idle past ``claim_idle``: the
    consumer started next, under another name or under the gone one's (a restart), handles
    each once: its pending-first recovery and its claim pass never both take one."""
    mode.skip_unless("shared", does_not="claim idle entries of any consumer (a partition's "
                     "new owner takes over its whole pending list)",
                     where="docs/guides/ordering.md 'Takeover'")  # fmt: skip
    first = mode.queue()
    async with first:
        ids = [await first.publish("job", {"n": n}, key=key) for n, key in enumerate(keys(40))]
    for stream in partition_streams(mode.stream, mode.partitions):  # read, never acked
        await client_for(stream).xreadgroup(first.group, "gone", {stream: ">"}, count=100)
    await anyio.sleep(0.6)  # idle past claim_idle
    consumer = "gone" if name == "the same" else "next"
    mq = mode.queue(consumer=consumer, claim_idle=0.5, claim_interval=0.05)
    handled = journal(mq)
    async with mq, mq.running():
        await wait_for(lambda: len(handled) >= 40, what="40 handled")
        await all_acked(mq)
        await anyio.sleep(1.0)  # a second delivery would come within claim_idle
    twice = [i for i, n in Counter(m.id for m in handled).items() if n > 1]
    assert not twice, f"{len(twice)} of 40 entries handled more than once, e.g. {twice[:3]}"
    assert Counter(m.id for m in handled) == Counter(ids)
