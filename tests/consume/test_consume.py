"""Publish -> route -> typed handler -> ack, against the real server."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import HandlerError, Message, MessageQueue, QueueStateError, StartFrom
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import run_until, wait_for

pytestmark = pytest.mark.anyio


class Email(BaseModel):
    to: str
    subject: str = ""


class LateOrder(BaseModel):
    item: LateItem  # defined below: the model is complete only once pydantic rebuilds it


class LateItem(BaseModel):
    name: str


async def test_typed_handler_receives_model_meta_and_envelope(make_queue: QueueFactory) -> None:
    mq = make_queue()
    got: list[Message[Email]] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        got.append(msg)

    async with mq:
        msg_id = await mq.publish("email", Email(to="a@b.c"), meta={"priority": "high"})
        await run_until(mq, lambda: len(got) == 1)
    (msg,) = got
    assert isinstance(msg.data, Email) and msg.data.to == "a@b.c"
    assert (msg.id, msg.type, msg.meta) == (msg_id, "email", {"priority": "high"})
    assert (msg.stream, msg.group, msg.delivery_count) == (mq.stream, "g", 1)
    assert msg.published_at.year >= 2024
    assert mq.stop_reason == "stopped" and mq.auto_stopped is False


async def test_everything_is_acked_after_handling(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    seen: list[str] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        seen.append(msg.id)

    async with mq:
        ids = await mq.publish_many("email", [Email(to=f"{i}@x") for i in range(500)])
        assert len(ids) == 500 and len(set(ids)) == 500
        await run_until(mq, lambda: len(seen) == 500)
        assert sorted(seen) == sorted(ids)
        assert await pending_count(client, mq.stream, "g") == 0


@pytest.mark.parametrize("protocol", [2, 3])
async def test_both_reply_protocols_consume_and_ack_everything(
    redis_url: str, stream: str, client: aioredis.Redis, protocol: int
) -> None:
    """Reads are parsed by streamq (RESP2 and RESP3 shapes); acks ride along with reads."""
    sep = "&" if "?" in redis_url else "?"
    mq = MessageQueue(f"{redis_url}{sep}protocol={protocol}", stream=stream, group="g",
                      start=StartFrom.EARLIEST)  # fmt: skip
    seen: list[str] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        seen.append(msg.data.to)

    async with mq:
        await mq.publish_many("email", [Email(to=f"{i}@x") for i in range(1000)])
        await run_until(mq, lambda: len(seen) == 1000)
        assert sorted(seen) == sorted(f"{i}@x" for i in range(1000))
        assert await pending_count(client, stream, "g") == 0
        assert mq.stats()["acked"] == 1000
    await mq.aclose()


async def test_model_completed_after_registration_still_validates(
    make_queue: QueueFactory,
) -> None:
    assert not LateOrder.__pydantic_complete__
    mq = make_queue()
    got: list[str] = []

    @mq.handler("order")
    async def handle(msg: Message[LateOrder]) -> None:
        got.append(msg.data.item.name)

    async with mq:
        await mq.publish("order", {"item": {"name": "book"}})
        await mq.publish("order", {"item": {}})  # invalid: dead-lettered, not handled
        await run_until(mq, lambda: got == ["book"])
        assert (await mq.topic_info()).dead_letters == 1


async def test_entry_added_by_a_foreign_client_is_consumed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    got: list[Email] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        got.append(msg.data)

    async with mq:
        # exactly what `redis-cli XADD task-stream '*' type email data '{"to":"a@b.c"}'` sends
        await client.execute_command(
            "XADD", mq.stream, "*", "type", "email", "data", '{"to":"a@b.c"}'
        )
        await run_until(mq, lambda: len(got) == 1)
    assert got == [Email(to="a@b.c")]


async def test_plain_def_handler_runs_in_a_worker_thread(make_queue: QueueFactory) -> None:
    mq = make_queue()
    threads: list[str] = []

    @mq.handler("email")
    def handle(msg: Message[Email]) -> None:
        threads.append(threading.current_thread().name)

    async with mq:
        await mq.publish("email", {"to": "x@y"})
        await run_until(mq, lambda: len(threads) == 1)
    assert threads[0] != threading.main_thread().name


async def test_object_form_and_untyped_handler(make_queue: QueueFactory) -> None:
    mq = make_queue()

    class Counter:
        message_type = "count"

        def __init__(self) -> None:
            self.values: list[int] = []

        async def handle(self, msg: Message[int]) -> None:
            self.values.append(msg.data)

    counter = Counter()
    mq.register(counter)
    raw: list[Any] = []

    @mq.handler("anything")
    async def untyped(msg: Message) -> None:  # type: ignore[type-arg]
        raw.append(msg.data)

    async with mq:
        await mq.publish_many("count", [1, 2, 3])
        await mq.publish("anything", {"nested": [1, {"a": None}]})
        await run_until(mq, lambda: len(counter.values) == 3 and len(raw) == 1)
    assert counter.values == [1, 2, 3]
    assert raw == [{"nested": [1, {"a": None}]}]


async def test_registration_errors(make_queue: QueueFactory) -> None:
    mq = make_queue()

    @mq.handler("email")
    async def one(msg: Message[Email]) -> None: ...

    with pytest.raises(
        HandlerError,
        match=r"type .email. is registered twice \(handler\): at .*test_consume.py:\d+ \(.*one\) and at .*test_consume.py:\d+ \(.*two\)",
    ):

        @mq.handler("email")
        async def two(msg: Message[Email]) -> None: ...

    with pytest.raises(HandlerError, match="message_type"):
        mq.register(object())
    with pytest.raises(HandlerError, match="Message"):

        @mq.handler("bad")
        async def wrong(msg: int) -> None: ...


async def test_concurrency_is_bounded(make_queue: QueueFactory) -> None:
    mq = make_queue(concurrency=4, max_in_flight=8, read_count=8)
    running = peak = handled = 0

    @mq.handler("email")
    async def slow(msg: Message[Email]) -> None:
        nonlocal running, peak, handled
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        handled += 1

    async with mq:
        await mq.publish_many("email", [{"to": f"{i}@x"} for i in range(100)])
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            fetched_peak = 0
            while handled < 100:
                fetched_peak = max(fetched_peak, mq.stats().get("in_flight", 0))
                await anyio.sleep(0.001)
            await mq.stop()
    assert peak == 4, f"expected exactly 4 handlers at once, saw {peak}"
    assert 4 < fetched_peak <= 8, f"{fetched_peak} entries fetched at once, max_in_flight=8"


async def test_stop_drains_running_handlers(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(grace=5.0)
    started, finished = anyio.Event(), []

    @mq.handler("email")
    async def slow(msg: Message[Email]) -> None:
        started.set()
        await anyio.sleep(0.3)
        finished.append(msg.id)

    async with mq:
        await mq.publish("email", {"to": "x@y"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await started.wait()
            await mq.stop()
        assert finished, "stop() returned before the running handler finished"
        assert await pending_count(client, mq.stream, "g") == 0, "drained entry was not acked"


async def test_grace_period_cancels_and_leaves_entry_pending(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue(grace=0.2)
    started = anyio.Event()

    @mq.handler("email")
    async def stuck(msg: Message[Email]) -> None:
        started.set()
        await anyio.sleep(30)

    async with mq:
        await mq.publish("email", {"to": "x@y"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await started.wait()
            with anyio.fail_after(5):
                await mq.stop()
        assert await pending_count(client, mq.stream, "g") == 1


async def test_start_latest_skips_history(make_queue: QueueFactory) -> None:
    mq = make_queue(start=StartFrom.LATEST)
    got: list[str] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        got.append(msg.data.to)

    await mq.publish("email", {"to": "old@x"})  # before the group exists
    async with mq:
        await mq.publish("email", {"to": "new@x"})
        await run_until(mq, lambda: len(got) == 1)
    assert got == ["new@x"]


async def test_closed_queue_says_how_to_reopen(make_queue: QueueFactory) -> None:
    mq = make_queue()
    async with mq:
        pass
    with pytest.raises(QueueStateError, match="open it again"):
        await mq.publish("job", 1)
    async with mq:  # reopening works (issue 12)
        await mq.publish("job", 1)
        with pytest.raises(QueueStateError, match="already open"):
            await mq.open()


async def test_a_stopped_queue_can_run_again(make_queue: QueueFactory) -> None:
    mq = make_queue()
    seen: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        seen.append(msg.data)

    async with mq:
        await mq.publish("job", 1)
        await run_until(mq, lambda: seen == [1])
        first_done = mq.done
        await mq.publish("job", 2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: seen == [1, 2])
            assert not mq.done.is_set(), "done must describe the current run"
            await mq.stop()
        assert first_done.is_set() and mq.done.is_set() and mq.stop_reason == "stopped"
