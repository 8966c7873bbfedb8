"""``handler_timeout`` in every mode: an attempt that runs longer is cancelled and is a
failure like any other (``TimeoutError``): dead-lettered at the delivery limit by a group,
logged and counted by a fan-out subscriber. (ERROR_HANDLING.md rows "Handler takes too
long", "Handler raises CancelledError that streamq did not ask for": handler_timeout is one
of streamq's own cancellations; services.md "Fan-out subscribers": failures.)"""

from __future__ import annotations

import anyio
import pytest

from streamq import Message, RetryPolicy
from tests.consume.contract.modes import Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_an_attempt_past_handler_timeout_is_cancelled_and_fails(mode: Mode) -> None:
    retry = RetryPolicy(attempts=1, max_deliveries=1)
    mq = mode.queue(handler_timeout=0.1, retry=retry)
    cancelled: list[str] = []

    @mq.handler("job")
    async def hangs(msg: Message[int]) -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise

    async with mq:
        entry = await mq.publish("job", 1, key="a")
        async with mq.running():
            await wait_for(lambda: mq.stats().get("failed") == 1, what="the timeout a failure")
            if mode.grouped:
                await all_acked(mq)  # dead-lettered, then acked
            letters = await mq.dead_letters()
    assert cancelled == [entry]
    if not mode.grouped:
        assert letters == []
        return
    (letter,) = letters
    assert letter.original_id == entry and "TimeoutError" in letter.error
