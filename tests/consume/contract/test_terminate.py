"""Termination and auto-stop: ``terminate_topic()`` stops every running consumer at once,
lets running handlers finish, sets ``done`` with ``auto_stopped`` and the reason, and the
topic can be used again; a stream (or a group) deleted by anyone stops its consumers the
same way.
(DESIGN.md "Topic termination", "Auto-stop"; docs/guides/control.md;
docs/guides/lifecycle.md; ERROR_HANDLING.md rows "Group or stream deleted by anyone", "The
stream of a fan-out subscriber is deleted"; services.md "Running".)"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue
from tests.consume.contract.modes import FANOUT_DOC, Mode
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def slow_journal(mq: MessageQueue, seconds: float) -> tuple[list[int], list[int]]:
    started: list[int] = []
    finished: list[int] = []

    @mq.handler("job")
    async def slow(msg: Message[int]) -> None:
        started.append(msg.data)
        await anyio.sleep(seconds)
        finished.append(msg.data)

    return started, finished


async def test_terminate_stops_at_once_lets_running_handlers_finish_and_the_topic_returns(
    mode: Mode,
) -> None:
    mq = mode.queue()
    started, finished = slow_journal(mq, 0.5)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: started == [1], what="the handler to start")
            await mq.terminate_topic()
            with anyio.fail_after(4):
                await mq.done.wait()
        assert finished == [1], "the running handler finished, not cancelled"
        assert (mq.stop_reason, mq.auto_stopped) == ("topic_terminated", True)
    again = mode.queue()  # the topic can be made again under its name
    _, finished_again = slow_journal(again, 0.0)
    async with again:
        await again.publish("job", 2, key="a")
        async with again.running():
            await wait_for(lambda: finished_again == [2], what="the re-created topic handled")


async def test_a_stream_deleted_by_anyone_stops_its_consumers(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    mq = mode.queue()
    _, finished = slow_journal(mq, 0.0)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: finished == [1], what="the first entry handled")
            for stream in mq.streams:  # each on its own node (a cluster)
                await client_for(stream).delete(stream)
            with anyio.fail_after(4):
                await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("stream_deleted", True)


async def test_a_group_destroyed_by_anyone_stops_its_consumers(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    mode.skip_unless("shared", "ordered", does_not="read through a group", where=FANOUT_DOC)
    mq = mode.queue()
    _, finished = slow_journal(mq, 0.0)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: finished == [1], what="the first entry handled")
            for stream in mq.streams:
                await client_for(stream).xgroup_destroy(stream, "g")
            with anyio.fail_after(4):
                await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("group_deleted", True)


@pytest.mark.parametrize("how", ["terminate", "delete"])
async def test_a_blocked_read_is_woken_by_a_terminate_or_a_deletion(
    kind: Mode, client: aioredis.Redis, how: str
) -> None:
    mq = kind.queue(block=4.0)  # a long block: the notice or the deletion must wake it
    _, finished = slow_journal(mq, 0.0)
    async with mq:
        await mq.publish("job", 1, key="a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: finished == [1], what="the first entry handled")
            await anyio.sleep(0.3)  # the reader is blocked again
            if how == "terminate":
                await mq.terminate_topic()
            else:
                await client.delete(*mq.streams)
            with anyio.move_on_after(1.5):
                await mq.done.wait()
            stopped_in_time = mq.done.is_set()
            tg.cancel_scope.cancel()  # setting done on its way out
    assert stopped_in_time, "still blocked in its read 1.5 s after the stream went"
