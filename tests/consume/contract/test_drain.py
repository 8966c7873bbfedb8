"""Drain: ``stop()`` stops reading, lets running handlers finish within ``grace`` and
acknowledges them; a handler still running after ``grace`` is cancelled and its entry
stays pending; a partial batch is flushed. (DESIGN.md public API ``mq.stop()``;
docs/guides/lifecycle.md; ERROR_HANDLING.md row "Shutdown"; docs/guides/ordering.md
"Release", "batches of one entry in ordered mode"; services.md "Running": stop() drains.)"""

from __future__ import annotations

import anyio
import pytest

from streamq import Message
from tests.consume.contract.modes import Mode, all_acked, pending
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_stop_lets_running_handlers_finish_and_acknowledges_them(mode: Mode) -> None:
    mq = mode.queue(grace=5.0)
    started: list[int] = []
    finished: list[int] = []

    @mq.handler("job")
    async def slow(msg: Message[int]) -> None:
        started.append(msg.data)
        await anyio.sleep(0.3)
        finished.append(msg.data)

    async with mq:
        await mq.publish_many("job", [1, 2, 3], key=lambda n: f"key-{n}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: len(started) == 3, what="three handlers running")
            await mq.stop()
            assert sorted(finished) == [1, 2, 3], "stop() returned before its handlers ended"
        assert mq.done.is_set() and (mq.stop_reason, mq.auto_stopped) == ("stopped", False)
        assert await pending(mq) == 0, "the drained entries were not acknowledged"


async def test_a_handler_running_past_grace_is_cancelled_and_its_entry_stays_pending(
    mode: Mode,
) -> None:
    mq = mode.queue(grace=0.2)
    started = anyio.Event()
    cancelled: list[str] = []

    @mq.handler("job")
    async def stuck(msg: Message[int]) -> None:
        started.set()
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise

    async with mq:
        entry = await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await started.wait()
            with anyio.fail_after(5):
                await mq.stop()
        assert cancelled == [entry]
        assert await pending(mq) == (1 if mode.grouped else 0)
        assert await mq.dead_letters() == []


async def test_a_partial_batch_is_flushed_on_stop(mode: Mode) -> None:
    mq = mode.queue()
    calls: list[list[int]] = []

    @mq.batch_handler("job", size=10, timeout=30)
    async def store(msgs: list[Message[int]]) -> None:
        calls.append([m.data for m in msgs])

    async with mq:
        await mq.publish_many("job", [1, 2, 3], key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: mq.stats().get("received") == 3, what="three read")
            await mq.stop()
        if mode.grouped:
            await all_acked(mq)
    if mode.kind == "ordered":  # batches of one entry in ordered mode (ordering.md)
        assert calls == [[1], [2], [3]]
    else:
        assert calls == [[1, 2, 3]], "the partial batch was not flushed whole on stop"
