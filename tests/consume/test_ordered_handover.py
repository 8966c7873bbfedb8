"""A partition handed from one ordered owner to the next, on the real server: entries that
waited in their key's lane are not counted as delivered by the handover, and an entry held
by a stop keeps its key waiting behind it with the new owner until it is resumed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from streamq import Message, MessageQueue, Retry, RetryPolicy, StartFrom
from streamq.wire.replies import text
from tests.helpers.poison_consumer import log_key
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LEASE = 2.0
CRASH_LEASE, MAX_DELIVERIES = 1.0, 2


def _owned_by(mq: MessageQueue) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        (owner,) = await mq.partition_owners()
        return owner is not None and owner[0] == mq.consumer

    return check


async def test_entries_waiting_behind_a_halted_key_are_not_counted_by_a_restart(
    make_queue: QueueFactory,
) -> None:
    """With ``max_deliveries=1`` a key halts on its first entry; its second entry waits in
    the lane. The consumer restarts (the partition is handed over gracefully) and the key
    is released: the second entry runs, as it never ran before (no "delivered 2 times")."""
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    first, second = (make_queue(ordered=True, ownership_lease=LEASE, retry=retry,
                                on_poison="halt") for _ in range(2))  # fmt: skip
    handled: list[int] = []
    poison = {"on": True}

    for mq in (first, second):

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.data["n"] == 0 and poison["on"]:
                raise RuntimeError("poison")
            handled.append(msg.data["n"])

    async def halted_on(entry_id: str) -> bool:
        return [h.entry_id for h in await first.halted_keys()] == [entry_id]

    async with first, second:
        ids = [await first.publish("job", {"n": n}, key="a") for n in range(2)]
        async with first.running():
            await wait_for(lambda: halted_on(ids[0]), what="key a halted on its first entry")
        async with second.running():  # the restart: a new owner takes the partition over
            await wait_for(_owned_by(second), what="the new owner")
            await wait_for(lambda: second.stats()["halted_keys"] == 1, what="the halt taken on")
            poison["on"] = False
            assert await second.release_halted_key("a")
            with anyio.move_on_after(10):
                while handled != [0, 1]:
                    await anyio.sleep(0.02)
            left = await second.halted_keys()
            assert handled == [0, 1], f"key a did not go on after its release: {handled}; {left}"
        assert await second.dead_letters() == []


async def test_a_held_entry_resumed_after_its_partition_moved_runs_before_its_key_goes_on(
    make_queue: QueueFactory,
) -> None:
    """Two ordered consumers; an entry of key ``a`` is stopped and its owner holds it; the
    owner leaves gracefully (the partition moves to the other); later entries of ``a`` are
    published; the stopped entry is resumed: it is handled before the later ones."""
    first, second = (make_queue(ordered=True, ownership_lease=LEASE) for _ in range(2))
    operator = make_queue(group="operator")  # never opened: it only stops and resumes
    handled: list[tuple[str, int]] = []

    for mq in (first, second):

        @mq.handler("job")
        async def handle(msg: Message[Any], mq: MessageQueue = mq) -> None:
            handled.append((mq.consumer, msg.data["n"]))

    async def held(entry_id: str) -> bool:  # set aside by its owner: out of the pending list
        pending = await first.client.xpending_range(first.stream, "g", min=entry_id,
                                                    max=entry_id, count=1)  # fmt: skip
        return pending == [] and entry_id in await first.stopped_messages()

    async with first, second, anyio.create_task_group() as tg:
        stopped = await first.publish("job", {"n": 0}, key="a")
        await operator.stop_message(stopped)
        await tg.start(first.run)
        await wait_for(_owned_by(first), what="the first consumer owning the stream")
        await wait_for(lambda: held(stopped), what="the stopped entry held by its owner")
        await tg.start(second.run)
        await first.stop()  # a graceful leave: the partition moves to the second
        await wait_for(_owned_by(second), timeout=15, what="the partition moved")
        later = [await first.publish("job", {"n": n}, key="a") for n in (1, 2)]

        async def read_by_second() -> bool:
            rows = await first.client.xpending_range(first.stream, "g", min=later[0],
                                                     max="+", count=10)  # fmt: skip
            return [row["consumer"] for row in rows] == [second.consumer.encode()] * 2

        await wait_for(read_by_second, what="the later entries read by the new owner")
        await anyio.sleep(0.3)  # a1 and a2 wait behind the held a0: neither may run
        assert handled == [], f"entries of key a ran while a0 is stopped: {handled}"
        await operator.resume_message(stopped)
        with anyio.move_on_after(10):
            while len(handled) < 3:
                await anyio.sleep(0.02)
        await second.stop()
    assert [n for _, n in handled] == [0, 1, 2], f"key a out of order: {handled}"
    assert {who for who, _ in handled} == {second.consumer}


@pytest.mark.slow  # starts consumer processes
async def test_an_entry_that_kills_its_consumers_is_still_counted_and_dead_lettered(
    redis_url: str, stream: str
) -> None:
    """A poison entry kills the consumer process running it (its key's earlier entry was
    handled just before, its ack not sent yet): its deaths are counted, so the next owner
    dead-letters it (after ``max_deliveries`` counted deaths) and its key goes on; the entry
    that waited behind it is not dead-lettered, whatever the number of owners."""
    publisher = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST)
    async with publisher:
        await publisher.publish("job", {"n": 0}, key="a")
        poison = await publisher.publish("job", {"n": 1, "poison": True}, key="a")
        await publisher.publish("job", {"n": 2}, key="a")
        deaths = 0
        for attempt in range(MAX_DELIVERIES + 2):
            process = _spawn(redis_url, stream, f"c{attempt}")
            try:
                with anyio.move_on_after(30):
                    while process.poll() is None and not await _handled(publisher, "2"):
                        await anyio.sleep(0.05)
            finally:
                _end(process)
            if process.returncode == 9:
                deaths += 1
                continue
            break
        handled = [text(n) for n in await publisher.client.lrange(log_key(stream), 0, -1)]
        letters = await publisher.dead_letters()
    assert [letter.original_id for letter in letters] == [poison], f"not dead-lettered: {handled}"
    # the first death is not counted: the earlier entry's ack was lost with the consumer, so
    # the poison was not the first pending entry of its key; every later death is counted
    assert deaths == MAX_DELIVERIES + 1, f"{deaths} consumers died on it (max {MAX_DELIVERIES})"
    assert handled[-1] == "2", f"key a did not go on: {handled}"


def _spawn(url: str, stream: str, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.poison_consumer", url, stream, name, str(CRASH_LEASE),
         str(MAX_DELIVERIES)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


async def _handled(mq: MessageQueue, n: str) -> bool:
    return n in [text(v) for v in await mq.client.lrange(log_key(mq.stream), 0, -1)]


DELAY = 3.0  # the wait a failed entry asked for: well past the handover's own time


@pytest.mark.parametrize("failure", ["retry", "backoff"])
async def test_a_failed_entry_keeps_its_wait_when_its_partition_changes_owner(
    make_queue: QueueFactory, failure: str
) -> None:
    """An entry of key ``a`` fails (``Retry(delay=3)``, or an error with a 3 s backoff); its
    owner leaves a moment later and the partition moves: the new owner runs it again only
    once its wait is over, then the key's next entry; the wait's record is gone after."""
    retry = RetryPolicy(attempts=1, backoff=DELAY, max_backoff=DELAY, max_deliveries=5)
    first, second = (make_queue(ordered=True, ownership_lease=LEASE, retry=retry)
                     for _ in range(2))  # fmt: skip
    calls: list[tuple[str, int, float]] = []

    for mq in (first, second):

        @mq.handler("job")
        async def handle(msg: Message[Any], mq: MessageQueue = mq) -> None:
            calls.append((mq.consumer, msg.data["n"], anyio.current_time()))
            if msg.data["n"] == 0 and len(calls) == 1:
                if failure == "retry":
                    raise Retry(delay=DELAY)
                raise RuntimeError("the service is down")

    async with first, second:
        for n in range(2):
            await first.publish("job", {"n": n}, key="a")
        async with first.running():
            await wait_for(lambda: len(calls) == 1, what="the first attempt")
            await anyio.sleep(0.3)
        async with second.running():  # the first left: the partition moves to the second
            await wait_for(_owned_by(second), what="the new owner")
            await wait_for(lambda: len(calls) == 3, timeout=DELAY + 10, what="both entries run")
            lease = await second.client.hgetall(f"streamq:{{{second.stream}}}:owner:g")
    (_, _, failed_at), (who, n, again_at), (_, last, _) = calls
    assert (who, n, last) == (second.consumer, 0, 1), f"not run again by the new owner: {calls}"
    waited = again_at - failed_at
    assert waited >= DELAY - 0.2, f"run again {waited:.2f} s after its failure (asked {DELAY})"
    assert not [f for f in lease if f.startswith(b"due:")], f"wait records left: {lease}"


async def test_a_key_waiting_for_a_pause_is_not_counted_by_graceful_handovers(
    make_queue: QueueFactory,
) -> None:
    """The group is paused: the head entry of key ``a`` waits in its owner's lane. The
    partition changes owner three times gracefully (each owner leaves); once resumed, the
    entry runs as its first delivery: an entry that only waited is not counted, however
    often its partition moves (as ordering.md says)."""
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=3)
    owners = [make_queue(ordered=True, ownership_lease=LEASE, retry=retry) for _ in range(4)]
    counts: list[int] = []

    for mq in owners:

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            counts.append(msg.delivery_count)

    first = owners[0]
    async with first, owners[1], owners[2], owners[3]:
        await first.pause()
        entry_id = await first.publish("job", {"n": 0}, key="a")

        async def read_by(mq: MessageQueue) -> bool:
            rows = await first.client.xpending_range(first.stream, "g", min=entry_id,
                                                     max=entry_id, count=1)  # fmt: skip
            return [row["consumer"] for row in rows] == [mq.consumer.encode()]

        for mq in owners[:3]:
            async with mq.running():
                await wait_for(lambda mq=mq: read_by(mq), what=f"the entry taken by {mq.consumer}")
                await anyio.sleep(0.2)  # it waits in the lane for the pause
        last = owners[3]
        async with last.running():
            await wait_for(lambda: read_by(last), what="the entry taken by the last owner")
            await first.resume()
            await wait_for(lambda: len(counts) == 1, what="the entry handled once resumed")
        letters = await first.dead_letters()
    assert counts == [1], f"delivery counts seen by the handler: {counts}"
    assert letters == [], f"dead-lettered without running: {letters}"
