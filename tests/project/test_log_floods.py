"""Issue 27 item 8: repeated warnings are summarised, the first of a kind in full, then a
count per interval; errors in repeated warnings are shortened. 10,000 unknown-type entries
(or thousands of failing ones) make tens of WARNING lines, not tens of thousands, and the
counts add up to what happened."""

from __future__ import annotations

import logging
import re

import anyio
import pytest

from streamq import Message, MessageQueue, RetryPolicy, _log_summary
from streamq._log_summary import LogSummary
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

SUMMARY = re.compile(r"…and ([\d,]+) more (.+) in the last \d+ s")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("streamq") and r.levelno >= logging.WARNING
    ]


def reported(lines: list[str], starts: str, kind: str) -> int:
    """Records of one kind: those logged in full plus the counts of the summary lines."""
    full = sum(1 for line in lines if line.startswith(starts))
    counted = sum(
        int(m[1].replace(",", ""))
        for m in map(SUMMARY.fullmatch, lines)
        if m is not None and m[2] == kind
    )
    return full + counted


async def run_until(mq: MessageQueue, predicate: object, what: str) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(mq.run)
        await wait_for(predicate, timeout=150, what=what)  # type: ignore[arg-type]
        await mq.stop()


@pytest.mark.timeout(200)
async def test_ten_thousand_unknown_type_entries_make_tens_of_warnings(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_log_summary, "SUMMARY_INTERVAL", 2.0)  # several intervals in the test
    caplog.set_level(logging.WARNING, logger="streamq")
    mq = make_queue(retry=RetryPolicy(unknown_type_deliveries=2), concurrency=16)
    mq.handler("job")(lambda msg: None)
    async with mq:
        for start in range(0, 10_000, 1_000):
            await mq.publish_many("sms", list(range(start, start + 1_000)))
        await run_until(mq, lambda: mq.stats()["dead_lettered"] >= 10_000, "all dead-lettered")
    lines = warnings(caplog)
    assert len(lines) < 100, f"{len(lines)} WARNING lines: {lines[:5]} ..."
    # (an entry can come twice: a read retried after a timeout re-reads the pending list)
    assert reported(lines, "no handler for type 'sms'", "entries without a handler here") >= 10_000
    assert 10_000 <= reported(lines, "dead-lettered", "dead letters") <= 10_100
    assert any(SUMMARY.fullmatch(line) for line in lines), "counts are reported"


@pytest.mark.timeout(200)
async def test_thousands_of_failing_entries_make_tens_of_short_lines(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="streamq")
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2), concurrency=16)

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        raise ValueError("x" * 5_000)

    async with mq:
        await mq.publish_many("job", list(range(2_000)))
        await run_until(mq, lambda: mq.stats()["dead_lettered"] >= 2_000, "all dead-lettered")
    lines = warnings(caplog)
    assert len(lines) < 50, f"{len(lines)} WARNING lines: {[x[:100] for x in lines[:5]]} ..."
    assert max(map(len, lines)) < 700, "errors in repeated warnings are shortened"
    assert 2_000 <= reported(lines, "handler failed", "failed deliveries of type 'job'") <= 2_100
    assert 2_000 <= reported(lines, "dead-lettered", "dead letters with an error") <= 2_100


def test_a_summary_logs_the_first_in_full_then_a_count_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    summary = LogSummary(interval=10, clock=lambda: now[0])
    logger = logging.getLogger("streamq.tests")
    caplog.set_level(logging.INFO, logger="streamq.tests")
    for second in range(25):  # one a second for 25 s, of two kinds
        now[0] = float(second)
        summary.log(logger, "a things", logging.WARNING, "a %d", second)
        summary.log(logger, "b things", logging.INFO, "b %d", second)
    now[0] = 26.0
    summary.flush()  # the third interval (20 s to 30 s) is not over
    assert [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.getMessage()[:3] in ("a 1", "a 2", "a 0", "…an") and "b" not in r.getMessage()
    ] == [
        ("WARNING", "a 0"),
        ("WARNING", "…and 9 more a things in the last 10 s"),
        ("WARNING", "a 10"),
        ("WARNING", "…and 9 more a things in the last 10 s"),
        ("WARNING", "a 20"),
    ]
    summary.flush(everything=True)
    assert caplog.records[-1].getMessage() == "…and 4 more b things in the last 6 s"
