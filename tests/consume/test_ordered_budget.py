"""Ordered mode's budget: a key that waits (halted, retried with backoff, behind a slow hot
key) holds a bounded part of its consumer's ``max_in_flight``, so the other keys of that
consumer, in its partition and in the others, go on. Two consumers share a topic of 4
partitions and 20 keys with a small budget (16 entries); on one node and on the embedded
cluster."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from streamq import Message, MessageQueue, Retry, RetryPolicy, StartFrom
from streamq._ids import StreamId
from streamq.config import OnPoison
from streamq.consume.refill import PendingRefill
from streamq.errors import ServerUnavailableError
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PARTITIONS, KEYS, PER_KEY, LEASE = 4, 20, 30, 2.0
SMALL_BUDGET: dict[str, Any] = {"max_in_flight": 16, "read_count": 8, "concurrency": 4}


class Handled:
    """Per key, the ``n`` of each entry handled, in order."""

    def __init__(self) -> None:
        self.by_key: dict[str | None, list[int]] = defaultdict(list)

    def add(self, msg: Message[Any]) -> None:
        self.by_key[msg.key].append(msg.data["n"])

    def healthy(self, but: str) -> int:
        return sum(len(ns) for key, ns in self.by_key.items() if key != but)

    async def wait(self, count: int, *, but: str, timeout: float) -> None:
        """Until ``count`` entries of the keys other than ``but`` were handled."""
        with anyio.move_on_after(timeout):
            while self.healthy(but) < count:
                await anyio.sleep(0.02)
        assert self.healthy(but) == count, (
            f"{self.healthy(but)} of the {count} entries of the keys beside {but!r} were "
            f"handled within {timeout} s"
        )


def _halted(mq: MessageQueue, key: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return [halted.key for halted in await mq.halted_keys()] == [key]

    return check


def _queues(where: str, topic: str, **options: Any) -> list[MessageQueue]:
    return [
        MessageQueue(where, stream=topic, group="g", consumer=f"c{i}", partitions=PARTITIONS,
                     ordered=True, ownership_lease=LEASE, block=0.2, start=StartFrom.EARLIEST,
                     **SMALL_BUDGET, **options)
        for i in range(2)
    ]  # fmt: skip


async def _publish(mq: MessageQueue, keys: list[str], per_key: int) -> None:
    data = [{"n": n, "key": key} for n in range(per_key) for key in keys]
    await mq.publish_many("job", data, key=lambda item: str(item["key"]))


async def _every_healthy_key_goes_on(
    where: str, topic: str, on_poison: OnPoison, retry: RetryPolicy
) -> None:
    queues = _queues(where, topic, on_poison=on_poison, retry=retry)
    handled = Handled()
    for mq in queues:

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.key == "poison":
                raise RuntimeError("poison")
            handled.add(msg)

    keys = ["poison", *(f"k{i}" for i in range(KEYS - 1))]
    healthy = (KEYS - 1) * PER_KEY
    async with queues[0], queues[1], queues[0].running(), queues[1].running():
        await _publish(queues[0], ["poison"], 2 * PER_KEY)  # a backlog of the poison key
        await _publish(queues[0], keys, PER_KEY)  # then every key in turn
        await handled.wait(healthy, but="poison", timeout=20)
    for key, ns in handled.by_key.items():
        assert ns == list(range(PER_KEY)), f"key {key} out of order: {ns}"
    assert "poison" not in handled.by_key


async def test_a_halted_key_does_not_stop_the_other_keys_of_its_consumer(
    where: str, topic: str
) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=2)
    await _every_healthy_key_goes_on(where, topic, "halt", retry)


async def test_a_key_retrying_poison_entries_does_not_stop_the_other_keys_of_its_consumer(
    where: str, topic: str
) -> None:
    # each poison entry waits about a second before it is dead-lettered: its key's 90
    # entries take far longer than the healthy keys need
    retry = RetryPolicy(attempts=1, backoff=0.25, max_backoff=0.5, max_deliveries=3)
    await _every_healthy_key_goes_on(where, topic, "dead_letter", retry)


async def test_a_slow_hot_key_with_a_backlog_does_not_stop_the_other_keys(
    where: str, topic: str
) -> None:
    queues = _queues(where, topic)
    handled = Handled()
    for mq in queues:

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.key == "hot":
                await anyio.sleep(0.02)  # its backlog takes 20 s
            handled.add(msg)

    backlog, per_key = 1000, 10
    healthy = (KEYS - 1) * per_key
    async with queues[0], queues[1]:
        await _publish(queues[0], ["hot"], backlog)  # ahead of every other key's entries
        await _publish(queues[0], [f"k{i}" for i in range(KEYS - 1)], per_key)
        async with queues[0].running(), queues[1].running():
            await handled.wait(healthy, but="hot", timeout=8)
            hot_so_far = len(handled.by_key["hot"])
            assert hot_so_far < backlog, "the hot key was not slow enough to show anything"
            await wait_for(  # its entries come back from the pending list, in order
                lambda: len(handled.by_key["hot"]) >= hot_so_far + 100, timeout=20,
                what="the hot key going on",
            )  # fmt: skip
    for key, ns in handled.by_key.items():
        assert ns == list(range(len(ns))), f"key {key} out of order"


async def test_a_key_waiting_to_retry_holds_no_handler_slot(where: str, topic: str) -> None:
    mq = MessageQueue(where, stream=topic, group="g", consumer="c1", ordered=True,
                      ownership_lease=LEASE, block=0.2, start=StartFrom.EARLIEST,
                      concurrency=1, max_in_flight=4)  # fmt: skip
    handled = Handled()
    asked: list[float] = []

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.key == "waits" and not asked:
            asked.append(anyio.current_time())
            raise Retry(delay=5.0)
        handled.add(msg)

    async with mq:
        await _publish(mq, ["waits"], 2)
        await _publish(mq, [f"k{i}" for i in range(4)], 3)
        async with mq.running():
            await handled.wait(12, but="waits", timeout=3)  # the one slot is free meanwhile
            assert handled.by_key["waits"] == []
            await wait_for(lambda: handled.by_key["waits"] == [0, 1], timeout=10, what="waits")
    assert anyio.current_time() - asked[0] >= 5.0


async def test_keys_past_their_share_are_handled_once_in_order_while_entries_keep_coming(
    where: str, topic: str
) -> None:
    mq = MessageQueue(where, stream=topic, group="g", consumer="c1", partitions=2,
                      ordered=True, ownership_lease=LEASE, block=0.2, start=StartFrom.EARLIEST,
                      max_in_flight=8, read_count=8, concurrency=2)  # fmt: skip
    handled = Handled()

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        await anyio.sleep(0.001)
        handled.add(msg)

    keys, rounds = ["a", "b", "c", "d"], 100
    async with mq, mq.running():
        for n in range(rounds):  # a key's entries keep coming while its lane is refilled
            await mq.publish_many("job", [{"n": n, "key": k} for k in keys], key=lambda d: d["key"])
            await anyio.sleep(0.002)
        await handled.wait(len(keys) * rounds, but="", timeout=30)
    assert {key: ns for key, ns in handled.by_key.items()} == {
        key: list(range(rounds)) for key in keys
    }


async def test_a_refill_that_fails_gives_the_partition_up() -> None:
    async def fenced(op: str, *args: object) -> list[Any]:
        raise ServerUnavailableError("the server went away")

    with anyio.CancelScope() as partition:  # what PartitionWorker.abandon cancels
        refill = PendingRefill(
            fenced, lambda: StreamId(1, 9), partition.cancel, "s", lambda ids: None
        )
        with anyio.fail_after(2):
            await refill(b"a", "1-1", 4)
        pytest.fail("the lane went on after its refill failed")
    assert partition.cancel_called


async def test_a_halted_keys_backlog_moves_to_the_next_owner_and_is_handled_once_released(
    where: str, topic: str
) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=2)
    first, second = (
        MessageQueue(where, stream=topic, group="g", consumer=f"c{i}", partitions=2,
                     ordered=True, ownership_lease=LEASE, block=0.2, start=StartFrom.EARLIEST,
                     retry=retry, on_poison="halt", **SMALL_BUDGET)
        for i in (1, 2)
    )  # fmt: skip
    handled = Handled()
    poison = {"on": True}
    for mq in (first, second):

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.key == "poison" and poison["on"]:
                raise RuntimeError("poison")
            handled.add(msg)

    keys = [f"k{i}" for i in range(9)]
    async with first, second, anyio.create_task_group() as tg:
        async with first.running():
            await _publish(first, ["poison"], 40)
            await _publish(first, keys, 10)
            await handled.wait(90, but="poison", timeout=20)
            await wait_for(_halted(first, "poison"), what="the poison key halted")
            tg.start_soon(second.run)  # joins, then takes every partition when first leaves
            await wait_for(lambda: bool(second.stats().get("owned_partitions", [])), what="a join")
        await wait_for(
            lambda: len(second.stats().get("owned_partitions", [])) == 2, what="all moved"
        )
        await _publish(second, ["poison", *keys], 10)  # n 0..9 again for every key
        await handled.wait(180, but="poison", timeout=20)
        assert second.stats()["halted_keys"] == 1
        poison["on"] = False
        assert await second.release_halted_key("poison")
        await wait_for(lambda: len(handled.by_key["poison"]) == 50, timeout=20,
                       what="the poison key's 50 entries once released")  # fmt: skip
        await second.stop()
    assert handled.by_key["poison"] == [*range(40), *range(10)]
    for key in keys:
        assert handled.by_key[key] == [*range(10), *range(10)]
