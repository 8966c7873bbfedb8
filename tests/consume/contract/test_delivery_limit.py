"""The delivery limit: Redis's delivery counter decides; past ``max_deliveries`` an entry
that keeps failing is dead-lettered with its last error, each delivery having had its
in-process attempts; an entry of a type without a handler has its own budget,
``unknown_type_deliveries``. (DESIGN.md "Retries"; docs/guides/delivery.md; ERROR_HANDLING.md
rows "Handler always raises", "Unknown type"; docs/guides/ordering.md "A handler fails",
"unknown type budget"; fan-out has no redelivery, and skips a type it has no handler for
with a log and a count: services.md "Fan-out subscribers".)"""

from __future__ import annotations

import logging

import pytest

from streamq import Message, MessageQueue, RetryPolicy
from tests.consume.contract.modes import FANOUT_DOC, Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def _one_letter(mq: MessageQueue) -> bool:
    return len(await mq.dead_letters()) == 1


async def test_a_poison_entry_is_dead_lettered_after_exactly_max_deliveries(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="redeliver or dead-letter", where=FANOUT_DOC)
    retry = RetryPolicy(attempts=2, backoff=0.01, max_backoff=0.05, jitter=0.0,
                        max_deliveries=3)  # fmt: skip
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    calls: list[int] = []
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        if msg.data == 0:
            calls.append(msg.delivery_count)
            raise RuntimeError(f"poison at delivery {msg.delivery_count}")
        handled.append(msg.data)

    async with mq:
        poison = await mq.publish("job", 0, key="a")
        await mq.publish("job", 1, key="a")  # behind the poison entry, same key
        async with mq.running():
            await wait_for(lambda: _one_letter(mq), what="the dead letter")
            await wait_for(lambda: handled == [1], what="the entry behind it")
            await all_acked(mq)
            stats = mq.stats()
        (letter,) = await mq.dead_letters()
    assert calls == [1, 1, 2, 2, 3, 3], "each delivery had its in-process attempts"
    assert (letter.original_id, letter.attempts) == (poison, 3)
    assert letter.error.startswith("failed 3 deliveries; last error: RuntimeError: poison at")
    assert letter.error_type == "builtins.RuntimeError"
    assert (stats["failed"], stats["dead_lettered"]) == (3, 1)


async def test_an_unknown_type_waits_then_is_dead_lettered_after_its_own_budget(
    mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, unknown_type_deliveries=2)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        handled.append(msg.data)

    caplog.set_level(logging.WARNING)
    async with mq:
        await mq.publish("sms", {"to": "x"}, key="a")
        await mq.publish("job", 1, key="b")
        async with mq.running():
            await wait_for(lambda: handled == [1], what="the handled type")
            if mode.grouped:
                await wait_for(lambda: _one_letter(mq), what="the unknown type's letter")
            else:  # no group, so no letter: skipped, with a log and a count (services.md)
                await wait_for(lambda: "'sms'" in caplog.text, timeout=1, what="a log of it")
            stats = mq.stats()
        if mode.grouped:
            (letter,) = await mq.dead_letters()
            assert letter.type == "sms" and "no handler for type 'sms'" in letter.error
        assert stats["skipped"] == (0 if mode.grouped else 1)
