"""Issue 18: no handler, entry or control notice can stall, crash or fool a consumer.

Each test reproduces one hole found by the fault and abuse probe, on the real server.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel, model_validator

from streamq import ConfigError, Message, MessageQueue, RetryPolicy
from streamq.consume.consumer import Consumer
from streamq.consume.reader import Reader
from streamq.wire.keys import Keys
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(attempts=1, backoff=0, jitter=0, max_deliveries=2)


class Item(BaseModel):
    n: int


class BuggyModel(BaseModel):
    """A model whose validator has a bug that raises KeyError for n == 13."""

    n: int

    @model_validator(mode="after")
    def check(self) -> BuggyModel:
        if self.n == 13:
            raise KeyError("missing-lookup")  # not a ValueError: pydantic lets it escape
        return self


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


async def dead_letter_reasons(mq: MessageQueue) -> dict[str, str]:
    return {d.original_id: d.error for d in await mq.dead_letters()}


# -- 1. a handler that raises CancelledError ----------------------------------------------
@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_handler_raising_cancelled_error_is_a_failure_not_a_stall(
    make_queue: QueueFactory, client: aioredis.Redis, kind: str
) -> None:
    mq = make_queue(retry=NO_RETRY, concurrency=2, max_in_flight=4)
    handled: list[int] = []

    if kind == "async":

        @mq.handler("item")
        async def handle(msg: Message[Item]) -> None:
            if msg.data.n == 0:
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                future.cancel()
                await future  # a task cancelled elsewhere: CancelledError not asked for
            handled.append(msg.data.n)
    else:

        @mq.handler("item")
        def handle_sync(msg: Message[Item]) -> None:
            if msg.data.n == 0:
                raise asyncio.CancelledError()
            handled.append(msg.data.n)

    async with mq:
        poison = await mq.publish("item", Item(n=0))
        await mq.publish_many("item", [Item(n=i) for i in range(1, 21)])
        # not stalled: the good entries after it are all handled, and the poison entry
        # follows the failure path (redelivered, then dead-lettered at max_deliveries)
        await run_until(mq, lambda: len(handled) == 20 and _has_dead_letter(mq, poison), timeout=20)
        reasons = await dead_letter_reasons(mq)
        assert "CancelledError" in reasons[poison], reasons[poison]
        assert await pending_count(client, mq.stream, "g") == 0
    assert mq.stop_reason == "stopped"


async def _has_dead_letter(mq: MessageQueue, original_id: str) -> bool:
    return original_id in await dead_letter_reasons(mq)


async def test_a_dead_worker_stops_the_consumer_with_reason_error(
    make_queue: QueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever kills a worker (here a bug that raises CancelledError from inside the
    worker loop), the consumer stops with reason 'error' and reports it: never silent."""
    mq = make_queue()

    @mq.handler("item")
    async def handle(msg: Message[Item]) -> None:
        pass

    async def broken(self: Consumer, *args: Any) -> None:
        raise asyncio.CancelledError()

    monkeypatch.setattr(Consumer, "process", broken)
    async with mq:
        await mq.publish("item", Item(n=1))
        with anyio.fail_after(10):
            with pytest.raises(BaseException):  # noqa: B017 - the error is the worker's
                await mq.run()
    assert mq.done.is_set()
    assert mq.stop_reason == "error"


async def test_a_dead_read_loop_stops_the_consumer_with_reason_error(
    make_queue: QueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mq = make_queue()

    @mq.handler("item")
    async def handle(msg: Message[Item]) -> None:
        pass

    async def broken(self: Reader) -> list[Any]:
        raise RuntimeError("bug in the read loop")

    monkeypatch.setattr(Reader, "read_new", broken)
    async with mq:
        with anyio.fail_after(10):
            with pytest.raises(RuntimeError, match="bug in the read loop"):
                await mq.run()
        health = await mq.health()
    assert mq.stop_reason == "error"
    assert health["consuming"] is False and health["stop_reason"] == "error"


# -- 2. any error while decoding, validating or describing --------------------------------
async def test_a_validator_bug_dead_letters_its_entry_and_nothing_else(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=NO_RETRY)
    handled: list[int] = []

    @mq.handler("item")
    async def handle(msg: Message[BuggyModel]) -> None:
        handled.append(msg.data.n)

    async with mq:
        ids = await mq.publish_many("item", [{"n": i} for i in range(10, 20)])
        await run_until(mq, lambda: len(handled) == 9)
        reasons = await dead_letter_reasons(mq)
        assert sorted(handled) == [n for n in range(10, 20) if n != 13]
        assert list(reasons) == [ids[3]]
        assert "KeyError" in reasons[ids[3]] and "missing-lookup" in reasons[ids[3]]
        assert await pending_count(client, mq.stream, "g") == 0
    assert mq.stop_reason == "stopped"


async def test_a_validator_bug_inside_a_batch_dead_letters_only_its_entry(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue(retry=NO_RETRY)
    handled: list[int] = []

    @mq.batch_handler("item", size=10, timeout=0.2)
    async def store(msgs: list[Message[BuggyModel]]) -> None:
        handled.extend(m.data.n for m in msgs)

    async with mq:
        ids = await mq.publish_many("item", [{"n": i} for i in range(10, 20)])
        await run_until(mq, lambda: len(handled) == 9)
        assert list(await dead_letter_reasons(mq)) == [ids[3]]


async def test_an_error_whose_str_raises_is_still_dead_lettered(make_queue: QueueFactory) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=1))
    calls: list[int] = []

    @mq.handler("item")
    async def handle(msg: Message[Item]) -> None:
        calls.append(msg.data.n)
        raise Unprintable()

    async with mq:
        entry_id = await mq.publish("item", Item(n=1))
        await run_until(mq, lambda: _has_dead_letter(mq, entry_id))
        assert "Unprintable" in (await dead_letter_reasons(mq))[entry_id]
    assert mq.stop_reason == "stopped" and calls == [1]


# -- 4. each entry's data is one JSON value on its own ------------------------------------
async def test_batch_fragments_are_not_joined_into_forged_payloads(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=NO_RETRY)
    got: list[tuple[str, Any]] = []

    @mq.batch_handler("raw", size=3, timeout=0.3)
    async def store(msgs: list[Message[Any]]) -> None:
        got.extend((m.id, m.data) for m in msgs)

    async with mq:
        # alone, each is invalid JSON; joined with commas they parse as [1,2], 3, 4
        ids = [
            (await client.xadd(mq.stream, {"type": "raw", "data": data})).decode()
            for data in ("[1", "2]", "3,4")
        ]
        await run_until(mq, lambda: _dead_letter_count(mq, 3))
        assert got == [], f"fragments were handled as values: {got}"
        assert sorted(await dead_letter_reasons(mq)) == sorted(ids)


async def test_batch_cannot_be_fed_a_forged_payload_by_its_neighbours(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=NO_RETRY)
    got: dict[str, Any] = {}

    @mq.batch_handler("raw", size=3, timeout=0.3)
    async def store(msgs: list[Message[Any]]) -> None:
        got.update((m.id, m.data) for m in msgs)

    async with mq:
        datas = ['{"s":"', '"}', '{"seq":1},{"seq":99,"payload":"forged"}']
        ids = [(await client.xadd(mq.stream, {"type": "raw", "data": d})).decode() for d in datas]
        good = (await client.xadd(mq.stream, {"type": "raw", "data": '{"seq":2}'})).decode()
        await run_until(mq, lambda: good in got and _dead_letter_count(mq, 3))
        assert got == {good: {"seq": 2}}
        assert sorted(await dead_letter_reasons(mq)) == sorted(ids)


async def _dead_letter_count(mq: MessageQueue, n: int) -> bool:
    return len(await mq.dead_letters()) >= n


# -- 5. unrouted deliveries are counted per group -----------------------------------------
async def test_unrouted_deliveries_of_another_group_do_not_count_for_this_one(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """Group A handles 'item' (and always fails); group B has no handler for it, so its
    deliveries are recorded as unrouted. A's handler must still run max_deliveries times."""
    policy = RetryPolicy(attempts=1, backoff=0, jitter=0, max_deliveries=3)
    a = make_queue(group="A", retry=policy)
    b = make_queue(group="B", retry=RetryPolicy(unknown_type_deliveries=50))
    calls: list[int] = []

    @a.handler("item")
    async def fail(msg: Message[Item]) -> None:
        calls.append(msg.delivery_count)
        raise RuntimeError("poison")

    @b.handler("other")
    async def other(msg: Message[Any]) -> None:
        pass

    async with a, b:
        entry_id = await a.publish("item", Item(n=1))
        # B's consumer sees the entry many times without a handler for it
        unrouted = Keys(a.stream).unrouted
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.run)
            await wait_for(
                lambda: _unrouted_total(client, unrouted, entry_id, 5),
                timeout=20,
                what="5 unrouted deliveries in group B",
            )
            await b.stop()
        await run_until(a, lambda: _has_dead_letter(a, entry_id), timeout=20)
    assert calls == [1, 2, 3], f"group A's handler ran for deliveries {calls}"


async def _unrouted_total(client: aioredis.Redis, key: str, entry_id: str, n: int) -> bool:
    values = await client.hgetall(key)
    total = sum(int(v) for k, v in values.items() if k.decode().startswith(entry_id))
    return total >= n


# -- 7. one bad entry does not sink its batch ---------------------------------------------
async def test_a_batch_that_keeps_failing_is_bisected_to_isolate_the_poison(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=2, backoff=0, jitter=0, max_deliveries=2))
    stored: set[int] = set()

    @mq.batch_handler("item", size=50, timeout=0.3)
    async def store(msgs: list[Message[Item]]) -> None:
        if any(m.data.n == 17 for m in msgs):
            raise RuntimeError("constraint violated by item 17")
        stored.update(m.data.n for m in msgs)

    async with mq:
        ids = await mq.publish_many("item", [Item(n=i) for i in range(50)])
        await run_until(mq, lambda: _has_dead_letter(mq, ids[17]), timeout=20)
        assert stored == set(range(50)) - {17}
        assert list(await dead_letter_reasons(mq)) == [ids[17]]
        assert await pending_count(client, mq.stream, "g") == 0


# -- 8. stream names and cluster redirections ---------------------------------------------
@pytest.mark.parametrize("name", ["orders{1}", "a}b", "{x"])
def test_stream_names_with_braces_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="stream"):
        MessageQueue("redis://127.0.0.1:1/0", stream=name)


@pytest.mark.parametrize(
    "reply",
    ["MOVED 4761 127.0.0.1:7001", "ASK 4761 127.0.0.1:7001", "CLUSTERDOWN The cluster is down"],
)
@pytest.mark.auto_stop
def test_cluster_redirections_are_transient_not_group_deleted(reply: str) -> None:
    from redis import exceptions as rx

    from streamq.errors import ServerUnavailableError
    from streamq.wire.translate import translated

    with pytest.raises(ServerUnavailableError), translated("s", "g"):
        raise rx.ResponseError(reply)


# -- 3. the control channel: validated, and only a hint -----------------------------------
CRAFTED_NOTICES = [
    json.dumps({"op": "stop", "id": {"a": 1}}),
    json.dumps({"op": "stop", "id": ["1-1"]}),
    json.dumps({"op": "resume", "id": 12}),
    json.dumps({"op": "stop", "id": "not-an-id"}),
    "[" * 100_000 + "]" * 100_000,
    json.dumps({"op": "terminate"}),
    json.dumps({"op": "stop", "id": "1-1"}),  # well-formed, but not stopped in Redis
    "\x00\xff not json",
    json.dumps(["op", "terminate"]),
    "x" * 200_000,
]


@pytest.mark.auto_stop
async def test_crafted_control_notices_neither_crash_nor_stop_consumers(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    handled: list[int] = []

    @mq.handler("item")
    async def handle(msg: Message[Item]) -> None:
        handled.append(msg.data.n)

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await mq.publish("item", Item(n=0))
        await wait_for(lambda: handled == [0], what="first entry")
        for notice in CRAFTED_NOTICES:
            await client.publish(Keys(mq.stream).control, notice)
        await anyio.sleep(0.5)
        assert not mq.done.is_set(), f"consumer stopped: {mq.stop_reason}"
        entry_id = await mq.publish("item", Item(n=1))
        await wait_for(lambda: handled == [0, 1], what="entry after the crafted notices")
        await client.publish(Keys(mq.stream).control, json.dumps({"op": "stop", "id": entry_id}))
        await mq.stop()
    assert mq.stop_reason == "stopped" and mq.auto_stopped is False


@pytest.mark.auto_stop
async def test_a_real_terminate_still_stops_consumers(make_queue: QueueFactory) -> None:
    mq = make_queue()

    @mq.handler("item")
    async def handle(msg: Message[Item]) -> None:
        pass

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await mq.publish("item", Item(n=0))
        await wait_for(lambda: mq.stats().get("handled") == 1, what="the entry handled")
        other = make_queue()
        async with other:
            await other.terminate_topic()
        with anyio.fail_after(5):
            await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("topic_terminated", True)


INTERRUPTED = """
import sys, anyio
from streamq import Message, MessageQueue, StartFrom
url, stream, ordered = sys.argv[1], sys.argv[2], sys.argv[3] == "ordered"
mq = MessageQueue(url, stream=stream, group="g", consumer="c1", ordered=ordered,
                  start=StartFrom.EARLIEST, claim_idle=1.0, ownership_lease=1.0)

@mq.handler("job")
async def job(msg: Message[int]) -> None:
    if msg.data == 0:
        raise KeyboardInterrupt

async def main() -> None:
    async with mq:
        await mq.publish_many("job", [0, 1, 2], key="k")
        await mq.run(handle_signals=False)

try:
    anyio.run(main)
except KeyboardInterrupt:
    print("interrupted", mq.stop_reason, flush=True)
"""


@pytest.mark.parametrize("mode", ["shared", "ordered"])
async def test_a_handler_raising_keyboard_interrupt_interrupts_the_program_alike_in_every_mode(
    redis_url: str, stream: str, mode: str
) -> None:
    """``KeyboardInterrupt`` is not a handler failure: it interrupts the program as Ctrl-C
    would (asyncio leaves its event loop with it at once), the consumer stopped with reason
    ``error`` in every mode; its entry stays pending and the next consumer handles it."""
    run = await anyio.run_process(
        [sys.executable, "-c", INTERRUPTED, redis_url, stream, mode], check=False
    )
    assert run.stdout.decode().split() == ["interrupted", "error"], run.stderr.decode()[-2000:]
    handled: list[int] = []
    mq = MessageQueue(redis_url, stream=stream, group="g", consumer="c2", ordered=mode == "ordered",
                      claim_idle=1.0, ownership_lease=1.0)  # fmt: skip

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handled.append(msg.data)

    async with mq, mq.running():
        await wait_for(lambda: sorted(handled) == [0, 1, 2], timeout=20)
    assert handled[0] == 0 or mode == "shared"  # its key's order is kept in ordered mode
