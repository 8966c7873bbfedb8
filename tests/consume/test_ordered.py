"""Ordered consumption on the real server: per key exactly once, in publish order, never two
at once, different keys concurrently; consumers joining and leaving; fencing; poison
entries dead-lettered or halting their key; mixing modes refused."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, MessageQueue, Retry, RetryPolicy, StartFrom
from streamq.consume.acks import Acker
from streamq.consume.ordered import OrderedConsumer
from streamq.wire import ownership as wire
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

LEASE = 2.0


class Journal:
    """What the handlers of every queue of a test saw: per key the IDs in the order their
    handlers started, and whether two entries of one key ever ran at once."""

    def __init__(self) -> None:
        self.by_key: dict[str | None, list[str]] = defaultdict(list)
        self.running: dict[str | None, int] = defaultdict(int)
        self.overlaps: list[str] = []
        self.active = self.most_active = 0
        self.tokens: set[int | None] = set()

    def register(self, mq: MessageQueue, delay: float = 0.0) -> None:
        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if self.running[msg.key]:
                self.overlaps.append(msg.id)
            self.running[msg.key] += 1
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.by_key[msg.key].append(msg.id)
            self.tokens.add(msg.fencing_token)
            try:
                await anyio.sleep(random.uniform(0, delay) if delay else 0)
            finally:
                self.running[msg.key] -= 1
                self.active -= 1

    @property
    def handled(self) -> int:
        return sum(map(len, self.by_key.values()))


async def _publish(mq: MessageQueue, keys: list[str], per_key: int) -> dict[str, list[str]]:
    published: dict[str, list[str]] = defaultdict(list)
    for n in range(per_key):
        for key in keys:
            published[key].append(await mq.publish("job", {"n": n}, key=key))
    return published


async def test_one_key_at_a_time_in_order_and_keys_concurrently(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, concurrency=8, ownership_lease=LEASE)
    journal = Journal()
    journal.register(mq, delay=0.01)
    async with mq:
        published = await _publish(mq, [f"k{i}" for i in range(6)], 15)
        async with mq.running():
            await wait_for(lambda: journal.handled == 90, what="90 handled")
    assert dict(journal.by_key) == dict(published)  # exactly once, in publish order
    assert journal.overlaps == []
    assert journal.most_active > 1  # different keys ran at once
    assert len(journal.tokens) == 1  # one owner, one lease: one fencing token


async def test_keyless_entries_are_ordered_among_themselves(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, concurrency=8, ownership_lease=LEASE)
    journal = Journal()
    journal.register(mq, delay=0.005)
    async with mq:
        ids = [await mq.publish("job", {"n": n}) for n in range(20)]
        async with mq.running():
            await wait_for(lambda: journal.handled == 20, what="20 handled")
    assert journal.by_key[None] == ids and journal.overlaps == []


async def test_consumers_joining_and_leaving_keep_every_key_in_order(
    make_queue: QueueFactory,
) -> None:
    queues = [make_queue(ordered=True, partitions=4, concurrency=4, ownership_lease=LEASE)
              for _ in range(3)]  # fmt: skip
    journal = Journal()
    for mq in queues:
        journal.register(mq, delay=0.004)
    keys = [f"customer-{i}" for i in range(12)]
    published: dict[str, list[str]] = defaultdict(list)

    async def publish_some(per_key: int) -> None:
        for key, ids in (await _publish(queues[0], keys, per_key)).items():
            published[key] += ids

    async with queues[0], queues[1], queues[2], queues[0].running():
        await publish_some(10)
        async with queues[1].running():  # a join: a share of the partitions moves
            await publish_some(10)
            await wait_for(lambda: len(queues[1].stats()["owned_partitions"]) == 2,
                           what="the second consumer owning 2 partitions")  # fmt: skip
            async with queues[2].running():
                await publish_some(10)
                await wait_for(lambda: bool(queues[2].stats()["owned_partitions"]),
                               what="the third consumer owning a partition")  # fmt: skip
            await publish_some(10)  # the third left gracefully
        await publish_some(10)  # the second left too
        await wait_for(lambda: journal.handled == 600, timeout=30, what="600 handled")
    assert dict(journal.by_key) == dict(published)
    assert journal.overlaps == []
    assert len(journal.tokens) > 1  # partitions changed hands


async def test_every_partition_has_one_owner_and_the_loads_are_balanced(
    make_queue: QueueFactory, redis_url: str, stream: str
) -> None:
    queues = [make_queue(ordered=True, partitions=5, ownership_lease=LEASE) for _ in range(2)]
    for mq in queues:
        Journal().register(mq)
    async with queues[0].running(), queues[1].running():
        await wait_for(
            lambda: sorted(len(mq.stats()["owned_partitions"]) for mq in queues) == [2, 3],
            what="2 and 3 partitions",
        )
        owners = await queues[0].partition_owners()
    names = {mq.consumer for mq in queues}
    assert all(o is not None and o[0] in names for o in owners)


async def test_a_stale_owners_ack_and_read_are_refused(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue()
    group = mq.group
    assert group is not None
    async with mq:
        entry = await mq.publish("job", {"n": 1})
    old = await wire.acquire(client, stream, group, "old", LEASE)
    assert old is not None
    assert await wire.fenced(client, stream, group, "old", old, "read", 10) is not None
    await client.hset(wire.lease_key(stream, group), "expires", "0")  # it lapsed
    new = await wire.acquire(client, stream, group, "new", LEASE)
    assert new == old + 1
    assert await wire.fenced(client, stream, group, "old", old, "ack", entry) is None
    assert await wire.fenced(client, stream, group, "old", old, "read", 10) is None
    assert not await wire.renew(client, stream, group, "old", old, LEASE)
    assert await wire.acquire(client, stream, group, "old", LEASE) is None  # new holds it
    claimed = await wire.fenced(client, stream, group, "new", new, "claim", "0-0", 10)
    assert claimed is not None and [row[0].decode() for row in claimed[2]] == [entry]
    assert await wire.fenced(client, stream, group, "new", new, "ack", entry) == [1, 1]


async def test_a_read_carries_acks_only_while_the_lease_holds(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue()
    group = mq.group
    assert group is not None
    async with mq:
        first, second, third = await mq.publish_many("job", [{"n": 1}, {"n": 2}, {"n": 3}])
    owner = await wire.acquire(client, stream, group, "owner", LEASE)
    assert owner is not None
    read = await wire.fenced(client, stream, group, "owner", owner, "read", 2)
    assert read is not None and [row[0].decode() for row in read[1]] == [first, second]
    # the next read acks what it carries, in the same script call, then reads on
    read = await wire.fenced(client, stream, group, "owner", owner, "read", 10, first, second)
    assert read is not None and [row[0].decode() for row in read[1]] == [third]
    assert read[3] == 2, f"the read should have acked both IDs it carried: {read}"
    pending = await client.xpending_range(stream, group, "-", "+", 10)
    assert [p["message_id"].decode() for p in pending] == [third]
    idle = await wire.fenced(client, stream, group, "owner", owner, "read", 10)
    assert idle is not None and idle[0] == 2 and idle[2] == 0  # nothing new, nothing acked
    await client.hset(wire.lease_key(stream, group), "expires", "0")  # it lapsed
    assert await wire.fenced(client, stream, group, "owner", owner, "read", 10, third) is None
    pending = await client.xpending_range(stream, group, "-", "+", 10)
    assert [p["message_id"].decode() for p in pending] == [third], "a stale read acked"


async def test_partitions_read_no_more_than_max_in_flight_together(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(partitions=4, ordered=True, ownership_lease=LEASE, concurrency=2,
                    max_in_flight=8, read_count=8, start=StartFrom.EARLIEST)  # fmt: skip
    release = anyio.Event()

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        await release.wait()

    async with mq:
        await mq.publish_many("job", list(range(200)), key=lambda n: f"k{n}")
        async with mq.running():
            await wait_for(lambda: mq.stats()["received"] >= 8, what="8 entries read")
            with anyio.move_on_after(1.0):  # a window for another partition to read too
                while mq.stats()["received"] <= 8:
                    await anyio.sleep(0.02)
            received, in_flight = mq.stats()["received"], mq.stats()["in_flight"]
            release.set()
    assert received <= 8 and in_flight <= 8, (
        f"the partitions read {received} entries ({in_flight} held) with max_in_flight=8"
    )


async def test_a_poison_entry_is_dead_lettered_and_its_key_goes_on(
    make_queue: QueueFactory,
) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=3)
    mq = make_queue(ordered=True, ownership_lease=LEASE, retry=retry)
    handled: list[tuple[str | None, int]] = []
    calls: dict[int, int] = defaultdict(int)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data["n"] == 1:
            calls[1] += 1
            raise RuntimeError("poison")
        handled.append((msg.key, msg.data["n"]))

    async with mq:
        for n in range(3):
            await mq.publish("job", {"n": n}, key="a")
        await mq.publish("job", {"n": 9}, key="b")
        async with mq.running():
            await wait_for(lambda: len(handled) == 3, what="3 handled")
            letters = await mq.dead_letters()
    assert handled.index(("a", 0)) < handled.index(("a", 2))
    assert calls[1] == 3 and len(letters) == 1 and "poison" in letters[0].error


async def test_a_halted_key_waits_until_released_while_other_keys_go_on(
    make_queue: QueueFactory,
) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=2)
    mq = make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt")
    handled: list[tuple[str | None, int]] = []
    poison = {"on": True}

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data["n"] == 1 and poison["on"]:
            raise RuntimeError("poison")
        handled.append((msg.key, msg.data["n"]))

    async with mq:
        for n in range(3):
            await mq.publish("job", {"n": n}, key="a")
        async with mq.running():
            await wait_for(_halted(mq), what="key a halted")
            await mq.publish("job", {"n": 5}, key="b")
            await wait_for(lambda: ("b", 5) in handled, what="key b goes on")
            assert ("a", 2) not in handled
            assert mq.stats()["halted_keys"] == 1
            poison["on"] = False
            assert await mq.release_halted_key("a")  # retry it
            await wait_for(lambda: ("a", 2) in handled, what="key a goes on")
        assert await mq.dead_letters() == []
    assert [n for key, n in handled if key == "a"] == [0, 1, 2]


def _halted(mq: MessageQueue) -> Any:
    async def check() -> bool:
        return len(await mq.halted_keys()) == 1

    return check


async def test_skipping_a_halted_key_dead_letters_its_entry(make_queue: QueueFactory) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    mq = make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt")
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data["n"] == 0:
            raise RuntimeError("poison")
        handled.append(msg.data["n"])

    async with mq:
        for n in range(2):
            await mq.publish("job", {"n": n})
        async with mq.running():
            await wait_for(_halted(mq), what="halted")
            (halted,) = await mq.halted_keys()
            assert halted.key is None and "poison" in halted.reason
            assert await mq.release_halted_key(None, skip=True)
            await wait_for(lambda: handled == [1], what="the next entry")
            letters = await mq.dead_letters()
    (letter,) = letters
    # the letter says why the key halted: the handler's last error
    assert letter.error.startswith("skipped by an operator after its key halted: ")
    assert "RuntimeError: poison" in letter.error, letter.error


async def test_opening_ordered_beside_unordered_consumers_is_refused_naming_them(
    make_queue: QueueFactory,
) -> None:
    shared = make_queue()
    Journal().register(shared)
    async with shared.running():
        await shared.publish("job", {})
        await wait_for(lambda: shared.stats().get("handled") == 1, what="the unordered read")
        ordered = make_queue(ordered=True, ownership_lease=LEASE)
        with pytest.raises(ConfigError, match=f"unordered by '{shared.consumer}'"):
            await ordered.open()
    await anyio.sleep(LEASE)  # the unordered consumer counts as active for a lease's time
    ordered = make_queue(ordered=True, ownership_lease=LEASE)
    Journal().register(ordered)
    async with ordered.running():
        await wait_for(lambda: ordered.stats().get("owned_partitions") == [0], what="owned")
        late = make_queue()
        with pytest.raises(ConfigError, match=f"ordered mode by '{ordered.consumer}'"):
            await late.open()


def test_bad_ordered_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="on_poison must be"):
        MessageQueue(stream="s", ordered=True, on_poison="drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ownership_lease"):
        MessageQueue(stream="s", ordered=True, ownership_lease=0)
    with pytest.raises(ConfigError, match=r"on_poison='halt' halts a key in ordered mode"):
        MessageQueue(stream="s", on_poison="halt")


@pytest.mark.auto_stop
async def test_a_terminated_topic_stops_its_ordered_consumers(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, partitions=2, ownership_lease=LEASE)
    journal = Journal()
    journal.register(mq)
    async with mq:
        await mq.publish("job", {"n": 0}, key="a")
        async with mq.running():
            await wait_for(lambda: journal.handled == 1, what="handled")
            await mq.terminate_topic()
            with anyio.fail_after(10):
                await mq.done.wait()
    assert mq.auto_stopped and mq.stop_reason in ("topic_terminated", "stream_deleted")


@pytest.mark.auto_stop
async def test_a_deleted_partition_other_than_the_first_stops_the_consumer(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(ordered=True, partitions=2, ownership_lease=LEASE)
    journal = Journal()
    journal.register(mq)
    async with mq:
        await mq.publish_many("job", [{"n": 0}, {"n": 1}], key=lambda d: f"k{d['n']}")
        async with mq.running():
            await wait_for(lambda: journal.handled == 2, what="handled")
            await mq.client_for(mq.streams[1]).delete(mq.streams[1])  # the first stays
            with anyio.fail_after(5):
                await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("stream_deleted", True)


async def test_ordered_consumers_keep_keys_in_order_on_a_cluster_too(
    where: str, topic: str
) -> None:
    queues = [
        MessageQueue(where, stream=topic, group="g", consumer=f"c{i}", partitions=4,
                     ordered=True, ownership_lease=LEASE, block=0.2, start=StartFrom.EARLIEST)
        for i in range(2)
    ]  # fmt: skip
    journal = Journal()
    for mq in queues:
        journal.register(mq, delay=0.002)
    async with queues[0], queues[1], queues[0].running():
        published = await _publish(queues[0], [f"k{i}" for i in range(8)], 10)
        async with queues[1].running():
            await wait_for(lambda: journal.handled == 80, timeout=20, what="80 handled")
    assert dict(journal.by_key) == dict(published) and journal.overlaps == []


async def test_a_stopped_entry_holds_its_key_until_resumed(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True, ownership_lease=LEASE)
    handled: list[tuple[str | None, int]] = []

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        handled.append((msg.key, msg.data["n"]))

    async with mq:
        ids = [await mq.publish("job", {"n": n}, key="a") for n in range(3)]
        await mq.stop_message(ids[1])
        await mq.publish("job", {"n": 9}, key="b")
        async with mq.running():
            await wait_for(lambda: ("b", 9) in handled and ("a", 0) in handled, what="a0, b9")
            await anyio.sleep(0.5)  # a1 is stopped: a2 must not run meanwhile
            assert ("a", 2) not in handled and ("a", 1) not in handled
            await mq.resume_message(ids[1])
            await wait_for(lambda: ("a", 2) in handled, what="a resumed")
    assert [n for key, n in handled if key == "a"] == [0, 1, 2]


async def test_the_acker_returns_once_closed_with_acks_still_queued(
    client: aioredis.Redis, stream: str
) -> None:
    """A partition released right after its last ack: the acker sends it and returns at
    once (it used to wait for a wake-up already spent, up to the flush timeout)."""
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry = await client.xadd(stream, {"type": "job", "data": "{}"})
    await client.xreadgroup("g", "c", {stream: ">"})
    acker = Acker(client, stream, "g")
    acker.ack(entry.decode())
    acker.close()
    with anyio.fail_after(2):
        await acker.run()
    assert acker.acked == 1 and (await client.xpending(stream, "g"))["pending"] == 0


async def test_retry_with_a_delay_keeps_its_key_waiting_behind_it(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(ordered=True, ownership_lease=LEASE)
    handled: list[tuple[int, float]] = []
    asked: list[float] = []

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data["n"] == 0 and not asked:
            asked.append(anyio.current_time())
            raise Retry(delay=0.3)
        handled.append((msg.data["n"], anyio.current_time()))

    async with mq:
        for n in range(3):
            await mq.publish("job", {"n": n}, key="a")
        async with mq.running():
            await wait_for(lambda: len(handled) == 3, what="3 handled")
    assert [n for n, _ in handled] == [0, 1, 2]
    assert handled[0][1] - asked[0] >= 0.3


async def test_terminating_the_topic_forgets_its_halted_keys(make_queue: QueueFactory) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    mq = make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt")

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        raise RuntimeError("poison")

    async with mq:
        await mq.publish("job", {}, key="a")
        async with mq.running():
            await wait_for(_halted(mq), what="halted")
            await mq.terminate_topic()
            await mq.done.wait()
        assert await mq.halted_keys() == []


async def test_an_ordered_consumer_exports_its_partitions_rebalances_and_halted_keys(
    make_queue: QueueFactory,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from streamq.metrics import QueueCollector

    mq = make_queue(ordered=True, partitions=3, ownership_lease=LEASE)
    Journal().register(mq)
    async with mq.running():
        await wait_for(lambda: mq.stats().get("owned_partitions") == [0, 1, 2], what="owned")
        registry = CollectorRegistry()
        collector = QueueCollector(mq)
        registry.register(collector)
        text = (await anyio.to_thread.run_sync(generate_latest, registry)).decode()
        registry.unregister(collector)
        collector.close()
    labels = f'consumer="{mq.consumer}",group="{mq.group}",stream="{mq.stream}"'
    assert f"streamq_owned_partitions{{{labels}}} 3.0" in text
    assert f"streamq_halted_keys{{{labels}}} 0.0" in text
    assert f"streamq_rebalances_total{{{labels}}}" in text


async def test_entries_a_lost_read_delivered_are_handled_before_later_ones(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """A read whose reply is lost (the connection dropped after the server delivered) leaves
    entries in the owner's pending list that its lanes never got: after the failed read the
    owner takes them over first, so no later entry of their key skips ahead of them."""
    mq = make_queue(ordered=True, ownership_lease=LEASE)
    journal = Journal()
    journal.register(mq)
    async with mq.running():
        first = await mq.publish("job", {"n": 0}, key="k")
        await wait_for(lambda: journal.handled == 1, what="the first entry")
        # the lost reply: entries delivered to this consumer's pending list, unseen by it
        lost = [await mq.publish("job", {"n": n}, key="k") for n in (1, 2)]
        await client.xreadgroup(mq.group, mq.consumer, {mq.stream: ">"}, count=2)
        later = await mq.publish("job", {"n": 3}, key="k")
        await client.client_kill_filter(_type="normal", skipme=True)  # the read then fails
        await wait_for(lambda: journal.handled == 4, timeout=20, what="every entry")
    assert journal.by_key["k"] == [first, *lost, later]
    assert not journal.overlaps


async def test_a_lane_that_finds_the_lease_lapsed_gives_the_partition_up(
    make_queue: QueueFactory,
) -> None:
    """A lane that finds its lease lapsed by the local clock (the event loop was late to
    renew it) stops. The partition must then be given up and taken again (a new token, its
    pending entries taken over): were the lease renewed a moment later, the stopped lane
    would otherwise hold its key, and its entries' room, for good."""
    mq = make_queue(ordered=True, ownership_lease=LEASE, block=2.0)  # reads wait a while
    handled: list[int] = []
    gate = anyio.Event()

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.data["n"] == 0:
            await gate.wait()
        handled.append(msg.data["n"])

    async with mq.running():
        await mq.publish("job", {"n": 0}, key="a")
        consumer = mq._consumer
        assert isinstance(consumer, OrderedConsumer)
        await wait_for(lambda: bool(consumer.workers), what="the partition owned")
        worker = consumer.workers[0]
        await mq.publish("job", {"n": 1}, key="a")
        await wait_for(lambda: consumer.stats.received == 2, what="entry 1 in its lane")
        worker.may_act = lambda: False  # type: ignore[method-assign]  # the lease lapses...
        gate.set()  # ...when entry 0 ends and entry 1 is next
        await wait_for(lambda: worker.lost or bool(worker.lanes and worker.lanes.stopped_keys),
                       what="entry 1 not started")  # fmt: skip
        del worker.may_act  # ...and is renewed at once
        await mq.publish("job", {"n": 2}, key="a")
        await wait_for(lambda: 2 in handled, timeout=3 * LEASE,
                       what=f"every entry of the key handled (handled {handled})")  # fmt: skip
    # entry 0 may run again (its ack was refused once the partition was given up)
    assert handled in ([0, 1, 2], [0, 0, 1, 2]), handled


async def test_an_ordered_member_that_just_died_is_not_taken_for_an_unordered_consumer(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    """A consumer started right after an ordered member died (a supervisor's restart) can
    find the dead member's heartbeat expired, and a live member's heartbeat since, while
    its last read is more recent than ``ownership_lease``: that is an ordered member that
    died, not a consumer of the other mode, and opening goes on."""
    async with make_queue(ordered=True, ownership_lease=LEASE):
        pass  # the topic and its group exist
    await client.xreadgroup("g", "dead", {stream: ">"}, count=1)  # as its fenced reads did
    seconds, micros = await client.time()
    expired = seconds * 1000 + micros // 1000 - 1
    await client.hset(wire.members_key(stream, "g"), "dead", f"{expired}|0")
    await wire.heartbeat(client, stream, "g", "alive", LEASE, [])  # keeps expired members
    assert "dead" not in await wire.live_members(client, stream, "g")
    async with make_queue(ordered=True, ownership_lease=LEASE):
        pass


async def test_a_halted_key_settled_by_an_owner_that_dead_letters_is_no_longer_listed(
    make_queue: QueueFactory,
) -> None:
    """A key halts (``on_poison="halt"``); the service is redeployed with the default
    ``on_poison="dead_letter"``: the new owner dead-letters the entry the key halted on
    and the key goes on, and ``halted_keys()`` no longer lists it."""
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    halting = make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt")
    redeployed = make_queue(ordered=True, ownership_lease=LEASE, retry=retry)
    handled: list[int] = []

    for mq in (halting, redeployed):

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.data["n"] == 0:
                raise RuntimeError("poison")
            handled.append(msg.data["n"])

    async with halting, redeployed:
        for n in range(2):
            await halting.publish("job", {"n": n}, key="a")
        async with halting.running():
            await wait_for(_halted(halting), what="key a halted")
        async with redeployed.running():
            await wait_for(lambda: handled == [1], what="key a going on")

            async def unlisted() -> bool:
                return await redeployed.halted_keys() == []

            await wait_for(unlisted, what="the halted key no longer listed")
        letters = await redeployed.dead_letters()
    assert len(letters) == 1 and "delivered 2 times (max 1)" in letters[0].error
