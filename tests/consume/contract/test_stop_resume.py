"""Stop and resume one message: a stopped entry is handled by nobody, a running handler of
it is cancelled, it is never dead-lettered for being stopped, and ``resume_message`` makes
it be handled once more with its original ID. (DESIGN.md "Stop / resume a message ID";
docs/guides/control.md; ERROR_HANDLING.md row "Stopped entry"; docs/guides/ordering.md
"stop_message on an entry of an ordered key"; fan-out refuses both: services.md "What it
cannot do".)"""

from __future__ import annotations

import anyio
import pytest

from streamq import Message, MessageQueue
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

NOT_STOPPED = "stop or resume a message (it has no consumer group)"


async def _stopped_ids(mq: MessageQueue) -> list[str]:
    return (await mq.topic_info()).stopped_ids


async def test_a_stopped_entry_waits_for_its_resume_then_is_handled_once_with_its_id(
    mode: Mode,
) -> None:
    mode.skip_unless("shared", "ordered", does_not=NOT_STOPPED, where=FANOUT_DOC)
    mq = mode.queue()
    handled: list[str] = []

    @mq.handler("job")
    async def keep(msg: Message[int]) -> None:
        handled.append(msg.id)

    async with mq:
        stopped = await mq.publish("job", 1, key="a")
        await mq.stop_message(stopped)
        other = await mq.publish("job", 2, key="b")
        async with mq.running():
            await wait_for(lambda: handled == [other], what="the entry not stopped")
            await all_acked(mq)  # the stopped entry is out of the pending list
            assert handled == [other] and await _stopped_ids(mq) == [stopped]
            await mq.resume_message(stopped)
            await wait_for(lambda: len(handled) == 2, what="the resumed entry")
            await all_acked(mq)
            assert await _stopped_ids(mq) == []
            assert await mq.dead_letters() == []
    assert handled == [other, stopped]


async def test_stopping_a_running_entry_cancels_its_handler_and_resume_runs_it_again(
    mode: Mode,
) -> None:
    mode.skip_unless("shared", "ordered", does_not=NOT_STOPPED, where=FANOUT_DOC)
    mq = mode.queue()
    started: list[str] = []
    cancelled: list[str] = []
    finished: list[str] = []

    @mq.handler("job")
    async def slow_first_time(msg: Message[int]) -> None:
        started.append(msg.id)
        try:
            if len(started) == 1:
                await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise
        finished.append(msg.id)

    async with mq:
        entry = await mq.publish("job", 1, key="a")
        async with mq.running():
            await wait_for(lambda: started == [entry], what="the handler to start")
            await mq.stop_message(entry)
            await wait_for(lambda: cancelled == [entry], what="the handler cancelled")
            assert finished == [] and await mq.dead_letters() == []
            await mq.resume_message(entry)
            await wait_for(lambda: finished == [entry], what="the resumed entry handled")
            await all_acked(mq)
            assert await mq.dead_letters() == []
    assert started == [entry, entry]
