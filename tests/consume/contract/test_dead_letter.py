"""Dead letters: an entry that can never succeed (``Reject``, a payload that fails its
model) is dead-lettered at once with the reason and acknowledged, and the entries after it
go on; fan-out has no dead letters: the entry is logged once at WARNING and counted in
``failed``. (docs/guides/delivery.md; ERROR_HANDLING.md rows "Handler raises Reject",
"Payload fails the handler's model", "A handler of a fan-out subscriber fails";
docs/guides/ordering.md "Reject(reason), bad payload": the key goes on.)"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import Message, MessageQueue, Reject
from tests.consume.contract.modes import Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


class Job(BaseModel):
    n: int


def fanout_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == "streamq.consume.outcomes" and r.levelno == logging.WARNING
    ]  # fmt: skip


async def _dead_lettered(mq: MessageQueue, count: int) -> None:
    async def letters() -> bool:
        return len(await mq.dead_letters()) >= count

    await wait_for(letters, what=f"{count} dead letter(s)")


async def test_reject_is_dead_lettered_at_once_and_the_key_goes_on(
    mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    mq = mode.queue()
    calls: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[Job]) -> None:
        calls.append(msg.data.n)
        if msg.data.n == 0:
            raise Reject("never valid")

    caplog.set_level(logging.WARNING)
    async with mq:
        rejected = await mq.publish("job", Job(n=0), key="a", meta={"origin": "test"})
        await mq.publish("job", Job(n=1), key="a")  # behind it, on the same key
        async with mq.running():
            await wait_for(lambda: mq.stats()["handled"] == 1, what="the entry after it")
            if mode.grouped:
                await _dead_lettered(mq, 1)
                await all_acked(mq)
            stats = mq.stats()
        letters = await mq.dead_letters()
    assert calls == [0, 1], "rejected once, not retried, and the key went on"
    if not mode.grouped:
        assert letters == [] and stats["failed"] == 1 and stats["dead_lettered"] == 0
        (warning,) = fanout_warnings(caplog)
        assert "never valid" in warning
        return
    (letter,) = letters
    assert (letter.original_id, letter.type, letter.group) == (rejected, "job", mq.group)
    assert json.loads(letter.data or "") == {"n": 0}
    assert json.loads(letter.meta or "{}").get("origin") == "test"
    assert letter.error.startswith("rejected: never valid") and letter.consumer == mq.consumer
    assert stats["dead_lettered"] == 1
    logged = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert any(f"dead-lettered {rejected} " in line for line in logged), (
        f"the record names the entry as its Message ID does ({rejected}): {logged}"
    )


async def test_a_payload_that_fails_its_model_is_dead_lettered_at_once(
    mode: Mode, client_for: Callable[[str], aioredis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    mq = mode.queue()
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[Job]) -> None:
        handled.append(msg.data.n)

    caplog.set_level(logging.WARNING)
    async with mq:
        # a foreign producer's entry (publish itself checks the model), on the first
        # partition stream, then a valid entry of the same key behind it
        first = client_for(mq.streams[0])
        await first.xadd(mq.streams[0], {"type": "job", "data": '{"n": "x"}', "key": "a"})
        await first.xadd(mq.streams[0], {"type": "job", "data": '{"n": 1}', "key": "a"})
        async with mq.running():
            await wait_for(lambda: handled == [1], what="the valid entry behind it")
            if mode.grouped:
                await _dead_lettered(mq, 1)
                await all_acked(mq)
            stats = mq.stats()
        letters = await mq.dead_letters()
    if not mode.grouped:
        assert letters == [] and stats["failed"] == 1
        assert any("invalid payload for 'job'" in w for w in fanout_warnings(caplog))
        return
    (letter,) = letters
    assert letter.error.startswith("invalid payload for 'job'"), letter.error
    assert letter.data == '{"n": "x"}' and stats["dead_lettered"] == 1
