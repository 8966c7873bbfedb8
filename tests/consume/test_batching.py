"""Batch handlers: size and timeout flushes, max_wait, mixing with single handlers,
whole and partial failure, a malformed entry inside a batch, shutdown."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import BatchConfig, ConfigError, Message, PartialFailure, RetryPolicy
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio


class Order(BaseModel):
    n: int


async def test_flush_at_size(make_queue: QueueFactory, client: aioredis.Redis) -> None:
    mq = make_queue()
    sizes: list[int] = []

    @mq.batch_handler("order", size=5, timeout=30)
    async def store(msgs: list[Message[Order]]) -> None:
        sizes.append(len(msgs))
        assert all(isinstance(m.data, Order) for m in msgs)

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(10)])
        await run_until(mq, lambda: sum(sizes) == 10, timeout=5)
        assert sizes == [5, 5]
        assert await pending_count(client, mq.stream, "g") == 0


async def test_flush_at_timeout_after_first_entry(make_queue: QueueFactory) -> None:
    mq = make_queue()
    flushed: list[tuple[int, float]] = []
    started = 0.0

    @mq.batch_handler("order", size=100, timeout=0.3)
    async def store(msgs: list[Message[Order]]) -> None:
        flushed.append((len(msgs), anyio.current_time() - started))

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(3)])
        started = anyio.current_time()
        await run_until(mq, lambda: len(flushed) == 1)
    size, after = flushed[0]
    assert size == 3
    assert 0.25 <= after < 2.0, f"flushed {after:.2f}s after start, timeout was 0.3s"


async def test_max_wait_flushes_beside_a_running_batch(make_queue: QueueFactory) -> None:
    mq = make_queue(batch=BatchConfig(size=100, timeout=0.1, max_wait=0.4))
    starts: list[tuple[int, float]] = []
    t0 = 0.0

    @mq.batch_handler("order")
    async def slow_store(msgs: list[Message[Order]]) -> None:
        starts.append((len(msgs), anyio.current_time() - t0))
        await anyio.sleep(1.5 if len(starts) == 1 else 0)

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        t0 = anyio.current_time()
        await mq.publish("order", Order(n=1))
        await wait_for(lambda: len(starts) == 1)
        await mq.publish("order", Order(n=2))
        await wait_for(lambda: len(starts) == 2, timeout=5)
        await mq.stop()
    second_started = starts[1][1]
    # without max_wait it would wait for the first batch (1.5s); with it, ~0.4s after read
    assert second_started < 1.3, f"second batch started at {second_started:.2f}s"


async def test_batches_of_one_type_keep_order(make_queue: QueueFactory) -> None:
    mq = make_queue()
    seen: list[int] = []

    @mq.batch_handler("order", size=7, timeout=0.05)
    async def store(msgs: list[Message[Order]]) -> None:
        await anyio.sleep(0.01)
        seen.extend(m.data.n for m in msgs)

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(50)])
        await run_until(mq, lambda: len(seen) == 50)
    assert seen == list(range(50))


async def test_mixed_single_and_batch_handlers_and_fallback(make_queue: QueueFactory) -> None:
    mq = make_queue()
    singles: list[str] = []
    batches: list[list[int]] = []

    @mq.handler("email")
    async def send(msg: Message[dict[str, str]]) -> None:
        singles.append(msg.data["to"])

    @mq.batch_handler("order", size=3, timeout=0.1)
    async def store(msgs: list[Message[Order]]) -> None:
        batches.append([m.data.n for m in msgs])

    async with mq:
        for i in range(3):
            await mq.publish("order", Order(n=i))
            await mq.publish("email", {"to": f"{i}@x"})
        await run_until(mq, lambda: len(singles) == 3 and sum(map(len, batches)) == 3)
    assert singles == ["0@x", "1@x", "2@x"]
    assert batches == [[0, 1, 2]]


async def test_object_form_batch_handler(make_queue: QueueFactory) -> None:
    from handlers.order_handler import OrderBatchHandler

    mq = make_queue()
    handler = OrderBatchHandler()
    mq.register(handler)
    async with mq:
        await mq.publish_many(
            "order", [{"order_id": f"o{i}", "customer": "ada", "amount": "1.5"} for i in range(20)]
        )
        await run_until(mq, lambda: len(handler.handled) == 20)
    assert str(handler.totals["ada"]) == "30.0"


async def test_whole_batch_failure_redelivers_every_entry(make_queue: QueueFactory) -> None:
    mq = make_queue(
        retry=RetryPolicy(attempts=1, max_deliveries=3), claim_idle=0.2, claim_interval=0.05
    )
    deliveries: list[list[int]] = []

    @mq.batch_handler("order", size=3, timeout=0.05)
    async def store(msgs: list[Message[Order]]) -> None:
        deliveries.append([m.delivery_count for m in msgs])
        if len(deliveries) == 1:
            raise RuntimeError("database down")

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(3)])
        await run_until(mq, lambda: sum(map(len, deliveries)) == 6)
    assert deliveries == [[1, 1, 1], [2, 2, 2]]


async def test_partial_failure_retries_only_failed_entries(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=1), claim_idle=0.2, claim_interval=0.05)
    calls: list[list[tuple[int, int]]] = []

    @mq.batch_handler("order", size=4, timeout=0.05)
    async def store(msgs: list[Message[Order]]) -> None:
        calls.append([(m.data.n, m.delivery_count) for m in msgs])
        failed = {
            m.id: "odd numbers fail once" for m in msgs if m.data.n % 2 and m.delivery_count == 1
        }
        if failed:
            raise PartialFailure(failed)

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(4)])
        await run_until(mq, lambda: sum(map(len, calls)) == 6)
        assert calls[0] == [(0, 1), (1, 1), (2, 1), (3, 1)]
        assert sorted(calls[1]) == [(1, 2), (3, 2)], "only the failed entries come back"
        assert await pending_count(client, mq.stream, "g") == 0


async def test_batches_of_every_partition_are_acked_and_partially_failed_by_message_id(
    make_queue: QueueFactory,
) -> None:
    # a Message's ID names its partition ("1:<ms>-<seq>"): outcomes must find the entries
    mq = make_queue(partitions=2, retry=RetryPolicy(attempts=1), claim_idle=0.2,
                    claim_interval=0.05)  # fmt: skip
    calls: list[tuple[str, int]] = []

    @mq.batch_handler("order", size=10, timeout=0.05)
    async def store(msgs: list[Message[Order]]) -> None:
        calls.extend((m.id, m.delivery_count) for m in msgs)
        failed = {m.id: "fails once" for m in msgs if m.data.n == 0 and m.delivery_count == 1}
        if failed:
            raise PartialFailure(failed)

    async with mq:
        ids = await mq.publish_many("order", [Order(n=i) for i in range(8)], key=str)
        assert {i.split(":")[0] for i in ids} == {"0", "1"}  # both partitions have entries

        async def all_acked() -> bool:
            return (await mq.topic_info()).pending == 0

        async with mq.running():
            await wait_for(lambda: len(calls) == 9, what="8 entries and 1 retried")
            await wait_for(all_acked, what="every entry of both partitions acked")
    retried = [i for i, count in calls if count == 2]
    assert retried == [ids[0]], "only the entry named by PartialFailure comes back"
    assert sorted(i for i, count in calls if count == 1) == sorted(ids)


async def test_malformed_entry_does_not_fail_its_batch(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    batches: list[list[int]] = []

    @mq.batch_handler("order", size=5, timeout=0.2)
    async def store(msgs: list[Message[Order]]) -> None:
        batches.append([m.data.n for m in msgs])

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(2)])
        await client.xadd(mq.stream, {"type": "order", "data": '{"n": "not a number"}'})
        await mq.publish_many("order", [Order(n=i) for i in range(2, 4)])
        await run_until(mq, lambda: sum(map(len, batches)) == 4)
        info = await mq.topic_info()
    assert batches == [[0, 1, 2, 3]]
    assert info.dead_letters == 1 and info.pending == 0


async def test_shutdown_flushes_a_partial_batch(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    got: list[int] = []

    @mq.batch_handler("order", size=100, timeout=60)
    async def store(msgs: list[Message[Order]]) -> None:
        got.extend(m.data.n for m in msgs)

    async with mq:
        await mq.publish_many("order", [Order(n=i) for i in range(3)])
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: mq.stats().get("received") == 3)
            await anyio.sleep(0.1)
            assert got == [], "flushed before size or timeout"
            with anyio.fail_after(5):
                await mq.stop()
        assert got == [0, 1, 2]
        assert await pending_count(client, mq.stream, "g") == 0, "partial batch left half-acked"


@pytest.mark.parametrize(
    ("failed", "says"),
    [(["1-0"], "takes a mapping .* got list"), ({"1-0": 3}, "reason for '1-0' must be text")],
)
def test_a_partial_failure_of_the_wrong_shape_says_what_it_takes(failed: object, says: str) -> None:
    """Raised in a batch handler, the message is what the handler's failure logs."""
    with pytest.raises(ConfigError, match=says):
        PartialFailure(failed)  # type: ignore[arg-type]
