"""Operating ordered consumption on the real server: topic_info() shows each partition's
owner (consumer and fencing token) while ordered consumers run, and none otherwise."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, RetryPolicy
from streamq.topic import control
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

LEASE = 2.0


async def wait_for_owned(mq: MessageQueue) -> None:
    owners: list[tuple[str, int] | None] = [None]

    async def owned() -> bool:
        owners[:] = await mq.partition_owners()
        return all(o is not None for o in owners)

    await wait_for(owned, what="every partition owned")


async def test_topic_info_shows_each_partitions_owner(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, partitions=3, ownership_lease=LEASE)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    group = mq.group or ""
    async with mq:
        await mq.publish("job", {"n": 1}, key="a")
        assert all(row.owners == {} for row in (await mq.topic_info()).partitions)
        async with mq.running():
            await wait_for_owned(mq)
            rows = (await mq.topic_info()).partitions
            expected = await mq.partition_owners()
    assert [row.owners[group] for row in rows] == expected
    assert {owner[0] for owner in expected if owner is not None} == {mq.consumer}


async def test_plain_ordered_stream_shows_its_one_owner(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, ownership_lease=LEASE)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    group = mq.group or ""
    async with mq:
        await mq.publish("job", {"n": 1}, key="a")
        assert (await mq.topic_info()).group(group).owner is None
        async with mq.running():
            await wait_for_owned(mq)
            owner = (await mq.topic_info()).group(group).owner
    assert owner is not None and owner[0] == mq.consumer and owner[1] >= 1


async def test_an_entry_stopped_while_it_waits_in_its_lane_is_held_with_its_key(
    make_queue: QueueFactory,
) -> None:
    """``stop_message`` from another process on an entry already read into its key's lane
    (queued behind a running entry of the same key): it is not handled until resumed, the
    entries of its key behind it wait, other keys go on; resumed, each runs once, in order."""
    mq = make_queue(ordered=True, ownership_lease=LEASE)
    operator = make_queue(group="operator")  # never opened: it only stops and resumes
    handled: list[tuple[str | None, int]] = []
    first_started, let_first_finish = anyio.Event(), anyio.Event()

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.key == "a" and msg.data["n"] == 0:
            first_started.set()
            await let_first_finish.wait()
        handled.append((msg.key, msg.data["n"]))

    async with mq:
        ids = [await mq.publish("job", {"n": n}, key="a") for n in range(3)]
        async with mq.running():
            with anyio.fail_after(10):
                await first_started.wait()

            async def all_read() -> bool:  # a1 and a2 wait in the lane of key a
                return int((await mq.client.xpending(mq.stream, "g"))["pending"]) == 3

            await wait_for(all_read, what="the three entries of key a read")
            await operator.stop_message(ids[1])
            await wait_for(lambda: ids[1] in mq._topic.stopped[0], what="the stop noticed")
            let_first_finish.set()
            await mq.publish("job", {"n": 9}, key="b")
            await wait_for(lambda: ("b", 9) in handled and ("a", 0) in handled, what="a0, b9")
            await anyio.sleep(0.5)  # a1 is stopped: neither it nor a2 may run meanwhile
            assert handled == [("a", 0), ("b", 9)], f"a stopped entry or its key ran: {handled}"
            assert await mq.stopped_messages() == [ids[1]]
            await operator.resume_message(ids[1])
            await wait_for(lambda: ("a", 2) in handled, what="key a resumed")
    assert [n for key, n in handled if key == "a"] == [0, 1, 2]


@pytest.mark.parametrize("resumed", ["later", "at_once"])
async def test_an_entry_stopped_while_its_key_spilled_it_is_held_with_its_key(
    make_queue: QueueFactory, resumed: str
) -> None:
    """Key ``a`` has more entries than its share of the budget (``max_in_flight=8``: two
    are kept in memory, the rest stay in the owner's pending list). Entry 6, not in memory,
    is stopped while the key runs: the key stops there; resumed (later, or at once, before
    the key gets there) entry 6 runs, then the rest, each once, in order; nothing stays
    pending."""
    mq = make_queue(ordered=True, ownership_lease=LEASE, max_in_flight=8, concurrency=4)
    operator = make_queue(group="operator")  # never opened: it only stops and resumes
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        await anyio.sleep(0.1)
        handled.append(msg.data["n"])

    async with mq:
        ids = await mq.publish_many("job", [{"n": n} for n in range(10)], key="a")
        async with mq.running():
            await wait_for(lambda: len(handled) >= 1, what="key a running")
            await operator.stop_message(ids[6])
            if resumed == "later":
                await wait_for(lambda: len(handled) >= 6, what="entries 0 to 5")
                await anyio.sleep(0.5)  # entry 6 is stopped: the key waits there
                assert handled == list(range(6)), f"key a ran past its stopped entry: {handled}"
            await operator.resume_message(ids[6])
            await wait_for(lambda: len(handled) >= 10, what=f"key a resumed (handled {handled})")
            await anyio.sleep(0.2)
        pending = await mq.client.xpending_range(mq.stream, "g", min="-", max="+", count=10)
    assert handled == list(range(10)), f"key a out of order or twice: {handled}"
    assert pending == [], f"left pending: {pending}"


async def test_an_entry_stopped_while_its_handler_runs_is_cancelled_and_held_with_its_key(
    make_queue: QueueFactory,
) -> None:
    """``stop_message`` on the entry whose handler is running: the handler is cancelled (as
    in shared mode), the entry is set aside and the entries of its key behind it wait while
    other keys go on; resumed, it runs again from the start, then its key goes on in order."""
    mq = make_queue(ordered=True, ownership_lease=LEASE)
    operator = make_queue(group="operator")  # never opened: it only stops and resumes
    handled: list[tuple[str | None, int]] = []
    runs_of_a0: list[str] = []
    a0_running = anyio.Event()

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.key == "a" and msg.data["n"] == 0:
            runs_of_a0.append("started")
            if len(runs_of_a0) == 1:  # the first run waits until it is cancelled
                a0_running.set()
                try:
                    await anyio.sleep(30)
                except anyio.get_cancelled_exc_class():
                    runs_of_a0.append("cancelled")
                    raise
        handled.append((msg.key, msg.data["n"]))

    async with mq:
        ids = [await mq.publish("job", {"n": n}, key="a") for n in range(3)]
        async with mq.running():
            with anyio.fail_after(10):
                await a0_running.wait()
            await operator.stop_message(ids[0])
            await wait_for(lambda: "cancelled" in runs_of_a0, what="a0's handler cancelled")
            await mq.publish("job", {"n": 9}, key="b")
            await wait_for(lambda: ("b", 9) in handled, what="key b handled meanwhile")
            await anyio.sleep(0.5)  # a0 is stopped: neither it nor a1, a2 may run meanwhile
            assert handled == [("b", 9)], f"a stopped entry or its key ran: {handled}"
            assert await mq.stopped_messages() == [ids[0]]
            await operator.resume_message(ids[0])
            await wait_for(lambda: ("a", 2) in handled, what="key a resumed")
    assert [n for key, n in handled if key == "a"] == [0, 1, 2]
    assert runs_of_a0 == ["started", "cancelled", "started"]


async def test_holding_an_entry_the_stop_already_took_keeps_its_delivery_count(
    client: aioredis.Redis, stream: str
) -> None:
    """A lane sets aside an entry whose stop already took it out of the pending list: the
    delivery count the stop recorded stays, so a resume gives it back with that count."""
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry = (await client.xadd(stream, {"type": "job", "data": "{}"})).decode()
    await client.xreadgroup("g", "c", {stream: ">"})
    for _ in range(2):  # delivered again: three deliveries in all
        await client.xclaim(stream, "g", "c", 0, [entry])
    assert await control.stop_message(client, stream, entry) == 1
    assert await control.hold_message(client, stream, "g", entry)
    assert await control.resume_message(client, stream, entry) == 1
    (row,) = await client.xpending_range(stream, "g", min=entry, max=entry, count=1)
    # as after a stop and a resume without a hold: the count less one (the resume itself is
    # not a delivery; the next one counts)
    assert row["times_delivered"] == 2, f"the delivery count was lost: {row}"


async def test_the_halted_keys_gauge_counts_a_halted_key_until_it_is_released(
    make_queue: QueueFactory,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from streamq.metrics import QueueCollector

    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    mq = make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt")
    poison = {"on": True}

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if poison["on"]:
            raise RuntimeError("poison")

    registry = CollectorRegistry()
    collector = QueueCollector(mq)
    registry.register(collector)

    async def gauge() -> str:
        text: str = (await anyio.to_thread.run_sync(generate_latest, registry)).decode()
        return next(line for line in text.splitlines() if line.startswith("streamq_halted_keys{"))

    try:
        async with mq:
            await mq.publish("job", {}, key="a")
            async with mq.running():

                async def halted() -> bool:
                    return (await gauge()).endswith(" 1.0")

                await wait_for(halted, what="the gauge to count the halted key")
                poison["on"] = False
                assert await mq.release_halted_key("a")

                async def released() -> bool:
                    return (await gauge()).endswith(" 0.0")

                await wait_for(released, what="the gauge to drop the released key")
    finally:
        registry.unregister(collector)
        collector.close()
