"""Flow control in every mode with a group (DESIGN.md "Flow control", docs/guides/
flow-control.md): a paused type's entries wait and run after the resume, holding no
handler slot; a rate limit shared by the group is never exceeded; a handler's Throttle
holds its key back and the entry runs again after it, counted as no failure and no
delivery. Fan-out has no group to pause, limit or throttle in (the guide says so)."""

from __future__ import annotations

import logging
import time
from typing import Literal

import anyio
import pytest

from streamq import Message, RateLimit, Throttle
from tests.consume.contract.modes import Mode, all_acked, keys
from tests.helpers.held_back import HELD_BACK_LIMITS, register_held_back_handlers
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

FLOW_DOC = "docs/guides/flow-control.md (flow control needs a consumer group)"


def grouped_only(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="pause, limit or throttle", where=FLOW_DOC)


async def test_a_paused_type_waits_without_a_handler_slot_and_runs_after_the_resume(
    mode: Mode,
) -> None:
    grouped_only(mode)
    mq = mode.queue(concurrency=1)
    handled: list[str] = []

    @mq.handler("report")
    async def report(msg: Message[int]) -> None:
        handled.append(f"report-{msg.data}")

    @mq.handler("email")
    async def email(msg: Message[int]) -> None:
        handled.append(f"email-{msg.data}")

    async with mq:
        await mq.pause("report")
        async with mq.running():
            # keys of their own: in ordered mode an email behind a report of its key waits
            await mq.publish_many("report", [0, 1, 2], key=lambda n: f"report-{n}")
            await mq.publish_many("email", [0, 1, 2], key=lambda n: f"email-{n}")
            # with one handler slot, the emails run although the reports wait before them
            await wait_for(lambda: len(handled) == 3, what="the three emails handled")
            await anyio.sleep(0.7)
            assert sorted(handled) == ["email-0", "email-1", "email-2"], handled
            assert (await mq.topic_info()).paused == {mq.group: ["report"]}
            await mq.resume("report")
            # the resume wakes what waits for it: not the next look at the pause (5 s)
            await wait_for(lambda: len(handled) == 6, timeout=2.0,
                           what="the reports handled after resume")  # fmt: skip
            await all_acked(mq)
        stats = mq.stats()
    assert stats["failed"] == 0 and stats["dead_lettered"] == 0


async def test_a_paused_group_takes_no_new_entry_until_resumed(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue()
    handled: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handled.append(msg.data)

    async with mq, mq.running():
        await mq.publish("job", 0, key="a")
        await wait_for(lambda: handled == [0], what="the first entry handled")
        await mq.pause()
        await anyio.sleep(1.0)  # every consumer sees a pause within a second
        await mq.publish_many("job", [1, 2, 3], key=lambda n: keys(4)[n])
        await anyio.sleep(1.0)
        assert handled == [0], f"handled while the group was paused: {handled}"
        await mq.resume()
        await wait_for(lambda: sorted(handled) == [0, 1, 2, 3], what="handled after resume")


async def test_a_rate_limit_is_never_exceeded_and_every_entry_runs(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue(rate_limits={"job": RateLimit(10, per=1.0, burst=1)}, concurrency=8)
    started: list[float] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        started.append(time.monotonic())

    async with mq:
        await mq.publish_many("job", list(range(25)), key=lambda n: keys(25)[n])
        async with mq.running():
            await wait_for(lambda: len(started) == 25, what="all 25 handled", timeout=15)
            await all_acked(mq)
        stats = mq.stats()
    started.sort()
    # permits come at least 0.1 s apart on the server's clock; a handler starts a moment
    # after its permit, a moment that varies with the load: 0.1 s of that allowed for
    most = max(sum(1 for t in started if s <= t < s + 0.9) for s in started)
    assert most <= 10, f"{most} entries started within 0.9 s under RateLimit(10, burst=1)"
    assert started[-1] - started[0] >= 1.5, "25 entries at 10/s took under 1.5 s"
    assert stats["failed"] == 0


async def test_a_throttled_entry_runs_again_after_its_wait_as_no_failure(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue()
    calls: list[tuple[float, int]] = []

    @mq.handler("call")
    async def call(msg: Message[str]) -> None:
        calls.append((time.monotonic(), msg.delivery_count))
        if len(calls) == 1:
            raise Throttle(retry_after=0.6)  # the API answered 429

    async with mq:
        async with mq.running():
            await mq.publish("call", "first", key="tenant-a")
            await wait_for(lambda: len(calls) == 2, what="the throttled entry run again")
            await all_acked(mq)
            assert await mq.dead_letters() == []
        stats = mq.stats()
    (first, first_count), (second, second_count) = calls
    assert second - first >= 0.55, f"ran again after {second - first:.2f} s, not 0.6"
    assert second_count == first_count, "a throttled attempt counted as a delivery"
    assert stats["failed"] == 0 and stats["retried"] == 0


@pytest.mark.parametrize("scope", ["key", "type"])
async def test_a_throttle_holds_back_the_entries_already_queued_for_the_handlers(
    mode: Mode, scope: Literal["key", "type"]
) -> None:
    """One handler slot, entries of one key read together: the first answers 429. The
    others, read before the throttle and queued for the handlers, wait too: the API is not
    called again until the throttle is over (docs/guides/flow-control.md)."""
    grouped_only(mode)
    mq = mode.queue(concurrency=1)
    started: list[tuple[float, int]] = []

    @mq.handler("call")
    async def call(msg: Message[int]) -> None:
        started.append((time.monotonic(), msg.data))
        if len(started) == 1:
            raise Throttle(retry_after=1.0, scope=scope)
        await anyio.sleep(0.01)

    async with mq:
        await mq.publish_many("call", list(range(12)), key="tenant-a")
        async with mq.running():
            await wait_for(lambda: len(started) == 13, what="all handled", timeout=15)
            await all_acked(mq)
    throttled_at = started[0][0]
    during = [n for at, n in started[1:] if at - throttled_at < 0.95]
    assert during == [], f"entries {during} called the API during the throttle"
    assert sorted(n for _, n in started[1:]) == list(range(12))


async def test_a_pause_holds_back_the_entries_already_queued_for_the_handlers(
    mode: Mode,
) -> None:
    """A backlog read into the handlers' queue: after pause(), only the entries already in
    a handler finish; the queued ones wait for the resume (DESIGN.md: a pause is effective
    within a second, in-flight entries finish)."""
    grouped_only(mode)
    mq = mode.queue(concurrency=2)
    started: list[float] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        started.append(time.monotonic())
        await anyio.sleep(0.1)

    async with mq:
        await mq.publish_many("job", list(range(60)), key=lambda n: keys(60)[n])
        async with mq.running():
            await wait_for(lambda: len(started) >= 4, what="the backlog being handled")
            await mq.pause()
            paused_at = time.monotonic()
            await anyio.sleep(2.0)
            late = [round(t - paused_at, 2) for t in started if t - paused_at > 1.0]
            assert late == [], f"entries started {late} s after the pause"
            assert len(started) < 60, "the whole backlog ran through the pause"
            await mq.resume()
            await wait_for(lambda: len(started) == 60, what="the rest after resume", timeout=20)
            await all_acked(mq)


async def test_a_batch_handlers_throttle_runs_the_batch_again_and_logs_no_failure(
    mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    grouped_only(mode)
    mq = mode.queue()
    batches: list[list[int]] = []

    @mq.batch_handler("call", size=5, timeout=0.1)
    async def call(msgs: list[Message[int]]) -> None:
        batches.append([msg.data for msg in msgs])
        if len(batches) == 1:
            raise Throttle(retry_after=0.3, scope="type")  # the API answered 429

    def all_ran_and_the_first_again() -> bool:
        calls = [n for batch in batches for n in batch]
        return set(calls) == set(range(5)) and all(calls.count(n) == 2 for n in batches[0])

    caplog.set_level(logging.INFO, logger="streamq")
    async with mq:
        async with mq.running():
            await mq.publish_many("call", list(range(5)), key="k")
            await wait_for(all_ran_and_the_first_again, what="the throttled batch run again")
            await all_acked(mq)
        stats = mq.stats()
    assert stats["failed"] == 0 and stats["retried"] == 0
    assert [r.getMessage() for r in caplog.records if "failed" in r.getMessage()] == []


async def test_a_throttle_holds_the_key_back_on_the_groups_other_consumers(mode: Mode) -> None:
    mode.skip_unless("shared", does_not="run a key on two consumers", where=FLOW_DOC)
    first = mode.queue(consumer="first")
    other = mode.queue(consumer="other")
    throttled_at: list[float] = []
    started: dict[str, float] = {}

    @first.handler("call")
    async def call(msg: Message[str]) -> None:
        if not throttled_at:
            throttled_at.append(time.monotonic())
            raise Throttle(retry_after=1.5)  # the API answered 429 for this tenant
        started.setdefault(msg.data, time.monotonic())

    @other.handler("call")
    async def other_call(msg: Message[str]) -> None:
        started.setdefault(msg.data, time.monotonic())

    async with first.running():
        await first.publish("call", "throttled", key="tenant-a")
        await wait_for(lambda: bool(throttled_at), what="the first call throttled")
    # the one consumer that saw the 429 is gone; the other never saw it
    async with other.running():
        await other.publish("call", "later", key="tenant-a")
        await other.publish("call", "another tenant", key="tenant-b")
        await wait_for(lambda: {"later", "another tenant"} <= set(started),
                       what="both handled by the other consumer", timeout=15)  # fmt: skip
    assert started["another tenant"] - throttled_at[0] < 1.3, "another key was held back"
    waited = started["later"] - throttled_at[0]
    assert waited >= 1.3, f"the throttled key ran on another consumer after {waited:.2f} s"


WAITING = {"pause": 2, "rate_limit": 3, "throttle": 1}


async def test_what_waits_is_counted_by_reason_until_it_runs(mode: Mode) -> None:
    """``mq.stats()``'s ``waiting_<reason>`` gauges: in shared mode the entries held back,
    in ordered mode the keys waiting at an entry (one entry per key here: the same count)."""
    grouped_only(mode)
    mq = mode.queue(rate_limits=HELD_BACK_LIMITS)
    handled: list[str] = []
    register_held_back_handlers(mq, handled)  # of 4 e-mails 3 wait, 2 reports, 1 call

    def waiting() -> dict[str, int]:
        stats = mq.stats()
        return {reason: stats.get(f"waiting_{reason}", -1) for reason in WAITING}

    async with mq:
        await mq.pause("report")
        async with mq.running():
            await mq.publish_many("email", [0, 1, 2, 3], key=lambda n: f"email-{n}")
            await mq.publish_many("report", [0, 1], key=lambda n: f"report-{n}")
            await mq.publish("call", 0, key="tenant-a")
            await wait_for(lambda: waiting() == WAITING, what=f"waiting {WAITING}")
            # one e-mail ran (with partitions, whichever was read first) and the call
            assert sorted(h.split("-")[0] for h in handled) == ["call", "email"], handled
            await mq.resume("report")
            await wait_for(lambda: waiting()["pause"] == 0, what="the reports released")
            await wait_for(lambda: len(handled) == 4, what="the reports handled")
            assert waiting() == {**WAITING, "pause": 0}


@pytest.mark.parametrize("held_back", ["paused", "rate_limited"])
async def test_a_type_held_back_does_not_starve_the_others_however_many_wait(
    mode: Mode, held_back: str
) -> None:
    """Ten times ``max_in_flight`` e-mails wait (paused, or over their rate limit) before
    the SMS: the SMS run at once all the same, and every e-mail runs once when it may (in
    shared mode most of them were kept as IDs only and are read again)."""
    grouped_only(mode)
    limits = {"email": RateLimit(50, per=1.0)} if held_back == "rate_limited" else None
    mq = mode.queue(max_in_flight=16, concurrency=4, read_count=8, rate_limits=limits)
    emails: list[int] = []
    sms: list[int] = []

    @mq.handler("email")
    async def email(msg: Message[int]) -> None:
        emails.append(msg.data)

    @mq.handler("sms")
    async def text(msg: Message[int]) -> None:
        sms.append(msg.data)

    async with mq:
        if held_back == "paused":
            await mq.pause("email")
        await mq.publish_many("email", list(range(160)), key=lambda n: f"user-{n % 40}")
        await mq.publish_many("sms", list(range(10)), key=lambda n: f"phone-{n}")
        async with mq.running():
            await wait_for(lambda: len(sms) == 10, what="the SMS handled past the e-mails",
                           timeout=2.5)  # fmt: skip
            if held_back == "paused":
                assert emails == [], "a paused type ran"
                await mq.resume("email")
            await wait_for(lambda: len(emails) == 160, what="every e-mail handled", timeout=15)
            await all_acked(mq)
        stats = mq.stats()
    assert sorted(emails) == list(range(160)), "an e-mail ran twice or not at all"
    assert stats["failed"] == 0 and stats["dead_lettered"] == 0


async def test_entries_deleted_while_they_wait_leave_nothing_pending(mode: Mode) -> None:
    """Waiting e-mails deleted meanwhile: the others run once each, and none stays
    pending (one whose fields the consumer kept may still run, as any entry read before its
    deletion; one kept as an ID only is acknowledged without a run)."""
    grouped_only(mode)
    mq = mode.queue(max_in_flight=8, concurrency=4, read_count=8)
    emails: list[int] = []

    @mq.handler("email")
    async def email(msg: Message[int]) -> None:
        emails.append(msg.data)

    async with mq:
        await mq.pause("email")
        await mq.publish_many("email", list(range(40)), key=lambda n: f"user-{n}")
        async with mq.running():
            await anyio.sleep(1.5)  # every e-mail read, waiting
            for stream in mq.streams:  # the even ones deleted meanwhile
                client = mq.client_for(stream)
                rows = await client.xrange(stream)
                even = [i for i, fields in rows if int(fields[b"data"]) % 2 == 0]
                await client.xdel(stream, *even)
            await mq.resume("email")
            await wait_for(lambda: set(range(1, 40, 2)) <= set(emails), what="the rest handled")
            await all_acked(mq)
    assert len(emails) == len(set(emails)), f"an e-mail ran twice: {sorted(emails)}"


async def test_entries_released_by_a_resume_never_exceed_max_in_flight(mode: Mode) -> None:
    """Ten times ``max_in_flight`` entries wait for a resume: they go to the handlers as
    room frees, so entries handed to the handlers and not finished never exceed
    ``max_in_flight`` (were they all handed over at once, a pause right after the resume
    would let every one of them start after it)."""
    mode.skip_unless(
        "shared", does_not="queue entries for the handlers before it looks at a pause",
        where="docs/guides/flow-control.md 'What waits, and where' (a key waits at its entry)",
    )  # fmt: skip
    mq = mode.queue(max_in_flight=16, concurrency=1, read_count=8)
    started = 0
    most_unfinished = 0

    @mq.handler("email")
    async def email(msg: Message[int]) -> None:
        nonlocal started, most_unfinished
        started += 1
        # handed over and not finished: this one, and those received but not yet started
        most_unfinished = max(most_unfinished, mq.stats()["received"] - started + 1)
        await anyio.sleep(0.001)

    async def settled() -> bool:
        before = mq.stats()["waiting_pause"]
        await anyio.sleep(0.3)
        return bool(before > 0 and mq.stats()["waiting_pause"] == before)

    async with mq:
        await mq.pause("email")
        await mq.publish_many("email", list(range(160)), key=lambda n: f"user-{n % 40}")
        async with mq.running():
            # read until the reads stop (all of them: they hold no unit while they wait)
            await wait_for(settled, what="the e-mails read while paused")
            await mq.resume("email")
            await wait_for(lambda: started == 160, what="every e-mail handled", timeout=15)
            await all_acked(mq)
    assert most_unfinished <= 16, f"{most_unfinished} entries handed over, max_in_flight 16"
