"""Batch handlers in every mode: every entry is handled once through its batch and
acknowledged; a ``PartialFailure`` fails only the entries it names, which a group delivers
again and a fan-out subscriber logs and counts. (DESIGN.md "Batching"; docs/guides/batches.md;
ERROR_HANDLING.md rows "Batch handler raises PartialFailure", "A handler of a fan-out
subscriber fails"; docs/guides/ordering.md: batches of one entry in ordered mode.)"""

from __future__ import annotations

from collections import Counter

import pytest

from streamq import Message, PartialFailure, RetryPolicy
from tests.consume.contract.modes import Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_a_partial_failure_fails_only_the_entries_it_names(mode: Mode) -> None:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    calls: list[tuple[str, int]] = []

    @mq.batch_handler("job", size=8, timeout=0.05)
    async def store(msgs: list[Message[int]]) -> None:
        calls.extend((m.id, m.delivery_count) for m in msgs)
        odd = {m.id: "odd fails once" for m in msgs if m.data % 2 and m.delivery_count == 1}
        if odd:
            raise PartialFailure(odd)

    async with mq:
        ids = await mq.publish_many("job", list(range(8)), key=lambda n: keys(8)[n])
        async with mq.running():
            if mode.grouped:  # the odd ones come back on a second delivery
                await wait_for(lambda: len(calls) == 12, what="8 calls and 4 again")
                await all_acked(mq)
            else:
                await wait_for(lambda: mq.stats()["failed"] == 4, what="4 failures counted")
            stats = mq.stats()
    first = Counter(i for i, count in calls if count == 1)
    assert first == Counter(ids), "each entry once in a first batch"
    again = sorted(i for i, count in calls if count == 2)
    assert again == (sorted(ids[1::2]) if mode.grouped else [])
    assert stats["handled"] == (8 if mode.grouped else 4)
