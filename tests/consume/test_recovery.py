"""Pending-first recovery, claiming idle entries, lease renewal, retries, auto-stop
(``handler_timeout`` has its own file, test_handler_timeout.py)."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, RedisFailure, Retry, RetryPolicy
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio


async def crash_after_reading(client: aioredis.Redis, stream: str, consumer: str, n: int) -> None:
    """What a consumer that dies mid-work leaves behind: n entries in its pending list."""
    await client.xreadgroup("g", consumer, {stream: ">"}, count=n)


async def test_own_pending_entries_are_handled_before_new_ones(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(consumer="worker-a", claim_idle=60)
    order: list[tuple[int, int]] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        order.append((msg.data, msg.delivery_count))

    async with mq:
        await mq.publish_many("job", [1, 2, 3])
        await crash_after_reading(client, mq.stream, "worker-a", 3)
        await mq.publish_many("job", [4, 5])
        await run_until(mq, lambda: len(order) == 5)
    assert [n for n, _ in order[:3]] == [1, 2, 3], f"pending entries not first: {order}"
    assert all(count == 2 for _, count in order[:3]), "redelivery must show in delivery_count"
    assert all(count == 1 for _, count in order[3:])


async def test_dead_consumers_entries_are_claimed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(consumer="alive", claim_idle=0.3, claim_interval=0.1)
    got = handled_messages(mq)

    async with mq:
        await mq.publish_many("job", list(range(10)))
        await crash_after_reading(client, mq.stream, "dead", 10)
        await run_until(mq, lambda: len(got) == 10, timeout=10)
        assert sorted(m.data for m in got) == list(range(10))
        assert {m.delivery_count for m in got} == {2}
        assert await pending_count(client, mq.stream, "g") == 0
        assert mq.stats()["claimed"] == 10


async def test_slow_handler_keeps_its_lease_and_runs_once(make_queue: QueueFactory) -> None:
    # claim_idle 0.6s, handler 2s: without lease renewal the other consumer would take it.
    a = make_queue(consumer="a", claim_idle=0.6, claim_interval=0.1)
    b = make_queue(consumer="b", claim_idle=0.6, claim_interval=0.1)
    runs: list[str] = []
    finished: list[str] = []

    async def slow(msg: Message[int]) -> None:
        runs.append(msg.id)
        await anyio.sleep(2.0)
        finished.append(msg.id)

    a.handler("job")(slow)
    b.handler("job")(slow)
    async with a, b, anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        await a.publish("job", 1)
        await wait_for(lambda: len(runs) == 1, what="first run")
        tg.start_soon(b.run)  # claims every 0.1 s what is idle 0.6 s while the handler runs
        await wait_for(lambda: bool(finished), what="the slow handler to finish")
        await a.stop()
        await b.stop()
    assert len(runs) == 1, f"the slow entry ran {len(runs)} times"


async def test_in_process_retries_then_success(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=3, backoff=0.01, jitter=0.0))
    calls: list[int] = []

    @mq.handler("job")
    async def flaky(msg: Message[int]) -> None:
        calls.append(msg.delivery_count)
        if len(calls) < 3:
            raise RuntimeError("transient")

    async with mq:
        await mq.publish("job", 1)
        await run_until(mq, lambda: len(calls) == 3)
        assert calls == [1, 1, 1], "in-process retries are not new deliveries"
        assert await pending_count(client, mq.stream, "g") == 0


async def test_failure_is_redelivered_with_delivery_count(make_queue: QueueFactory) -> None:
    mq = make_queue(
        retry=RetryPolicy(attempts=1, max_deliveries=5), claim_idle=0.2, claim_interval=0.05
    )
    deliveries: list[int] = []

    @mq.handler("job")
    async def fails_twice(msg: Message[int]) -> None:
        deliveries.append(msg.delivery_count)
        if msg.delivery_count < 3:
            raise RuntimeError("not yet")

    async with mq:
        await mq.publish("job", 1)
        await run_until(mq, lambda: len(deliveries) == 3)
    assert deliveries == [1, 2, 3]


async def test_retry_signal_redelivers_after_delay(make_queue: QueueFactory) -> None:
    mq = make_queue(claim_idle=30)  # only the Retry path can bring it back this fast
    seen: list[tuple[int, float]] = []

    @mq.handler("job")
    async def later(msg: Message[int]) -> None:
        seen.append((msg.delivery_count, anyio.current_time()))
        if msg.delivery_count == 1:
            raise Retry(delay=0.3)

    async with mq:
        await mq.publish("job", 1)
        await run_until(mq, lambda: len(seen) == 2)
    (first, t1), (second, t2) = seen
    assert (first, second) == (1, 2)
    assert t2 - t1 >= 0.28, f"retried after {t2 - t1:.3f}s, asked for 0.3s"


@pytest.mark.parametrize("how", ["destroy_group", "delete_stream"])
@pytest.mark.auto_stop
async def test_auto_stop_when_group_or_stream_disappears(
    make_queue: QueueFactory, client: aioredis.Redis, how: str
) -> None:
    mq = make_queue(block=5.0)  # a long block: the deletion must wake the reader
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        handled.append(msg.data)

    async with mq:
        await mq.publish("job", 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: handled == [1])
            if how == "destroy_group":
                await client.xgroup_destroy(mq.stream, "g")
            else:
                await client.delete(mq.stream)
            with anyio.fail_after(3):
                await mq.done.wait()
    assert mq.auto_stopped is True
    assert mq.stop_reason == ("group_deleted" if how == "destroy_group" else "stream_deleted")


async def test_ghost_consumers_are_removed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(dead_consumer_idle=0.2)

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None: ...

    async with mq:
        await client.xgroup_createconsumer(mq.stream, "g", "ghost")

        async def ghost_idle() -> bool:
            found = await client.xinfo_consumers(mq.stream, "g")
            return any(c["name"] == b"ghost" and c["idle"] > 250 for c in found)

        await wait_for(ghost_idle, what="the ghost idle past dead_consumer_idle")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)

            async def ghost_gone() -> bool:
                names = [c["name"] for c in await client.xinfo_consumers(mq.stream, "g")]
                return b"ghost" not in names

            await wait_for(ghost_gone, what="ghost consumer removal")
            await mq.stop()


async def test_key_of_the_wrong_type_is_a_clear_error(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    await client.set(mq.stream, "not a stream")
    with pytest.raises(RedisFailure, match="WRONGTYPE"):
        async with mq:
            pass


async def test_unrecoverable_read_error_stops_and_run_raises(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    mq.handler("job")(_noop)
    async with mq:  # the group exists; then someone replaces the stream with a string
        pipe = client.pipeline(transaction=True)
        pipe.delete(mq.stream)
        pipe.set(mq.stream, "replaced by a string")
        await pipe.execute()
        with pytest.raises(RedisFailure, match="WRONGTYPE"), anyio.fail_after(5):
            await mq.run()
    assert (mq.stop_reason, mq.auto_stopped) == ("error", True)
    assert mq.done.is_set()


async def _noop(msg: Message[int]) -> None:
    pass
