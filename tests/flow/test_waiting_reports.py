"""What a group's running consumers hold back for flow control, reported to the server
(``streamq:{<topic>}:waiting:<group>``, :mod:`streamq.flow.waiting`) and shown by
``topic_info().waiting`` (the CLI and the dashboard read it there): reported within a
couple of seconds, removed when the consumer stops, stale reports not counted, damaged
ones skipped."""

from __future__ import annotations

import json
import logging
import time

import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue
from streamq.flow.waiting import (
    REPORT_FRESH,
    REPORT_INTERVAL,
    REPORT_REFRESH,
    GroupWaiting,
    WaitingReporter,
    waiting_groups,
)
from streamq.testing import TEST_TIMINGS
from streamq.wire.damage import damaged_counts
from streamq.wire.keys import Keys
from tests.helpers.held_back import HELD_BACK_LIMITS, register_held_back_handlers
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

REPORTED_WITHIN = 3.0  # seconds: a report at most every second, on a poll every half second


async def group_waiting(mq: MessageQueue) -> GroupWaiting | None:
    return (await mq.topic_info()).waiting.get(mq.group or "")


def report(at_ms: int, pause: int = 0, rate_limit: int = 0, throttle: int = 0) -> str:
    """A report as streamq writes it."""
    return json.dumps(
        {"at": at_ms, "pause": pause, "rate_limit": rate_limit, "throttle": throttle},
        separators=(",", ":"),
    )


def now_ms() -> int:
    return int(time.time() * 1000)


# -- when a consumer writes -----------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_report_is_due_on_a_change_at_most_every_second_and_refreshed_while_not_zero() -> None:
    clock, counts = Clock(), {"pause": 0, "rate_limit": 0, "throttle": 0}
    reporter = WaitingReporter("s", "g", "c1", lambda: counts, clock=clock)
    first = reporter.due()  # at the start: a report an earlier run left under its name goes
    assert first is not None and first.counts == (0, 0, 0) and first.args()[1] == ""
    reporter.written(first)
    clock.now += 10 * REPORT_REFRESH
    assert reporter.due() is None  # nothing held back, nothing reported: no write
    counts["pause"] = 2
    due = reporter.due()
    assert due is not None and due.counts == (2, 0, 0) and due.key == Keys("s").waiting("g")
    reporter.written(due)
    counts["throttle"] = 1
    clock.now += REPORT_INTERVAL / 2
    assert reporter.due() is None  # changed, but written too lately
    clock.now += REPORT_INTERVAL / 2
    changed = reporter.due()
    assert changed is not None and changed.counts == (2, 0, 1)
    reporter.written(changed)
    clock.now += REPORT_REFRESH - 0.1
    assert reporter.due() is None  # unchanged: not written again yet
    clock.now += 0.2
    refreshed = reporter.due()
    assert refreshed is not None and refreshed.counts == (2, 0, 1)
    reporter.written(refreshed)
    counts.update(pause=0, throttle=0)
    clock.now += REPORT_INTERVAL
    cleared = reporter.due()
    assert cleared is not None and cleared.counts == (0, 0, 0)
    assert cleared.args()[1] == ""  # nothing held back: the field is removed
    reporter.written(cleared)
    clock.now += 10 * REPORT_REFRESH
    assert reporter.due() is None  # zero stays unwritten


# -- a running consumer ---------------------------------------------------------------
async def test_a_consumer_reports_what_it_holds_back_and_removes_it_when_it_stops(
    make_queue: QueueFactory, raw: aioredis.Redis
) -> None:
    mq = make_queue(rate_limits=HELD_BACK_LIMITS)
    handled: list[str] = []
    register_held_back_handlers(mq, handled)  # of 4 e-mails 3 wait, 2 reports, 1 call
    async with mq:
        await mq.pause("report")
        assert await group_waiting(mq) is None
        async with mq.running():
            await mq.publish_many("email", [0, 1, 2, 3])
            await mq.publish_many("report", [0, 1])
            await mq.publish("call", 0, key="tenant-a")
            await wait_for(lambda: mq.stats().get("waiting_rate_limit") == 3, what="3 waiting")
            await wait_for(lambda: mq.stats().get("waiting_throttle") == 1, what="1 throttled")
            started = time.monotonic()
            expected = (2, 3, 1)
            found: list[GroupWaiting | None] = [None]

            async def shown() -> bool:
                found[0] = waiting = await group_waiting(mq)
                return (
                    waiting is not None
                    and (waiting.pause, waiting.rate_limit, waiting.throttle) == expected
                )

            await wait_for(shown, timeout=REPORTED_WITHIN, what=f"topic_info shows {expected}")
            assert time.monotonic() - started < REPORTED_WITHIN
            waiting = found[0]
            assert waiting is not None and list(waiting.consumers) == [mq.consumer]
            assert waiting.consumers[mq.consumer].pause == 2 and waiting.total == 6
            await mq.resume("report")

            async def released() -> bool:
                waiting = await group_waiting(mq)
                return waiting is not None and waiting.pause == 0 and waiting.rate_limit == 3

            await wait_for(released, timeout=REPORTED_WITHIN, what="the resume reported")
        # stopped: the report is gone at once, not only once stale
        assert not await raw.hexists(Keys(mq.stream).waiting("g"), mq.consumer)
        assert await group_waiting(mq) is None


async def test_a_report_left_by_an_earlier_run_under_the_same_name_goes_at_the_start(
    make_queue: QueueFactory, raw: aioredis.Redis
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    key = Keys(mq.stream).waiting("g")
    async with mq:
        await mq.publish("job", 0)
        await raw.hset(key, mq.consumer, report(now_ms(), pause=4))  # it died holding 4
        assert await _pause_shown(mq, 4)
        async with mq.running():  # restarted under its name, holding nothing back
            await wait_for(
                lambda: _gone(raw, key, mq.consumer), timeout=REPORTED_WITHIN, what="removed"
            )
            assert await group_waiting(mq) is None


async def _gone(raw: aioredis.Redis, key: str, consumer: str) -> bool:
    return not await raw.hexists(key, consumer)


async def test_the_reports_of_two_consumers_are_summed(make_queue: QueueFactory) -> None:
    first, second = make_queue(), make_queue()
    for mq in (first, second):

        @mq.handler("job")
        async def job(msg: Message[int]) -> None: ...

    async with first, second:
        await first.pause("job")
        await first.publish_many("job", list(range(6)))
        async with first.running(), second.running():

            async def both() -> bool:
                waiting = await group_waiting(first)
                return waiting is not None and waiting.pause == 6

            await wait_for(both, timeout=5, what="6 paused entries reported, summed")
            waiting = await group_waiting(first)
            assert waiting is not None
            assert sum(r.pause for r in waiting.consumers.values()) == waiting.pause == 6


async def test_an_ordered_consumer_reports_its_keys_waiting(make_queue: QueueFactory) -> None:
    mq = make_queue(ordered=True)

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    async with mq:
        await mq.pause("job")
        await mq.publish_many("job", list(range(6)), key=lambda n: f"k{n % 3}")
        async with mq.running():

            async def three_keys() -> bool:
                waiting = await group_waiting(mq)
                return waiting is not None and waiting.pause == 3

            await wait_for(three_keys, timeout=10, what="3 keys waiting at an entry")
        assert await group_waiting(mq) is None


# -- stale and damaged reports --------------------------------------------------------
async def test_a_stale_report_is_not_counted_and_a_consumer_s_report_removes_it(
    make_queue: QueueFactory, raw: aioredis.Redis
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    key = Keys(mq.stream).waiting("g")
    async with mq:
        await mq.publish("job", 0)
        stale_ms = now_ms() - int(REPORT_FRESH * 1000) - 2000
        await raw.hset(key, mapping={"dead": report(stale_ms, pause=9),
                                     "alive": report(now_ms(), throttle=1)})  # fmt: skip
        waiting = await group_waiting(mq)
        assert waiting is not None and (waiting.pause, waiting.throttle) == (0, 1)
        assert list(waiting.consumers) == ["alive"]
        assert await waiting_groups(raw, mq.stream, ["g", "other"]) == {"g": waiting}
        await mq.pause("job")
        await mq.publish("job", 1)
        async with mq.running():
            await wait_for(lambda: raw.hexists(key, mq.consumer), timeout=REPORTED_WITHIN,
                           what="the consumer's report")  # fmt: skip
            assert not await raw.hexists(key, "dead")  # removed by the report written
            assert 0 < await raw.pttl(key) <= REPORT_FRESH * 1000  # the key expires


@pytest.mark.parametrize(
    "value", ["lots", '{"at": 1, "pause": -1, "rate_limit": 0, "throttle": 0}',
              '{"at": 1, "pause": true, "rate_limit": 0, "throttle": 0}',
              '{"pause": 1, "rate_limit": 0, "throttle": 0}', "far ahead"],
)  # fmt: skip
async def test_a_damaged_report_is_logged_once_counted_and_skipped(
    make_queue: QueueFactory, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    mq = make_queue()
    key = Keys(mq.stream).waiting("g")
    if value == "far ahead":
        value = report(now_ms() + 3_600_000, pause=5)
    async with mq:
        await mq.publish("job", 0)
        await raw.hset(key, mapping={"ghost": value, "alive": report(now_ms(), rate_limit=2)})
        before = damaged_counts().get("waiting", 0)
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                waiting = await group_waiting(mq)
                assert waiting is not None and waiting.rate_limit == 2 and waiting.pause == 0
                assert list(waiting.consumers) == ["alive"]
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1 and "damaged waiting record" in logged[0] and "'ghost'" in logged[0]
    assert damaged_counts()["waiting"] == before + 1


async def test_a_report_key_of_another_type_is_skipped_then_replaced_by_a_consumer(
    make_queue: QueueFactory, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    key = Keys(mq.stream).waiting("g")
    await raw.set(key, "not a hash")
    with caplog.at_level(logging.ERROR):
        async with mq:
            await mq.publish("job", 0)
            for _ in range(2):
                assert (await mq.topic_info()).waiting == {}
            await mq.pause("job")
            await mq.publish("job", 1)
            async with mq.running():
                await wait_for(lambda: _pause_shown(mq, 2), timeout=REPORTED_WITHIN,
                               what="the report written over the damaged key")  # fmt: skip
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1 and "expected a hash, found a string" in logged[0]


async def _pause_shown(mq: MessageQueue, count: int) -> bool:
    waiting = await group_waiting(mq)
    return waiting is not None and waiting.pause == count


async def test_terminating_the_topic_removes_its_waiting_reports(
    make_queue: QueueFactory, raw: aioredis.Redis
) -> None:
    async with make_queue() as mq:
        await mq.publish("job", 1)
        await raw.hset(Keys(mq.stream).waiting("g"), "c", report(now_ms(), pause=1))
        await mq.terminate_topic()
        assert not await raw.exists(Keys(mq.stream).waiting("g"))


# -- on the topic's slot, node and cluster --------------------------------------------
@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_partitioned_topic_reports_on_its_own_slot(
    where: str, topic: str, partitions: int
) -> None:
    mq = MessageQueue(where, stream=topic, group="g", consumer="c1", partitions=partitions,
                      config=TEST_TIMINGS)  # fmt: skip

    @mq.handler("job")
    async def job(msg: Message[int]) -> None: ...

    async with mq:
        await mq.pause("job")
        await mq.publish_many("job", list(range(8)), key=lambda n: f"k{n}")
        async with mq.running():
            await wait_for(lambda: _pause_shown(mq, 8), timeout=5, what="8 paused, reported")
            assert await mq.client.hexists(Keys(topic).waiting("g"), "c1")
            for stream in mq.streams if partitions > 1 else ():  # nothing on the partitions
                assert not await mq.client_for(stream).exists(Keys(stream).waiting("g"))
        assert not await mq.client.exists(Keys(topic).waiting("g"))
        await mq.terminate_topic()
