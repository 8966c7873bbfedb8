"""A periodic tick gives exactly one message: its entry is written with its claim in one
server-side step (a second publish of the tick adds nothing), and a tick whose claimer
died between its claim and its publish, killed with SIGKILL at that moment, is published
once by another running process. On one node and on a cluster, plain and partitioned."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from streamq import Message
from streamq.publish.periodic_runner import tick_time
from streamq.publish.ticks import Fields, claim_key, claim_tick, last_published, publish_tick
from streamq.topic.partitions import partition_for_key, partition_streams
from streamq.wire.client import connect
from tests.conftest import sync_client, wait_for
from tests.helpers.queues import queue

pytestmark = pytest.mark.anyio

TICK = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def tick_stream(topic: str, partitions: int, name: str) -> str:
    """The stream a keyless periodic publisher ``name`` publishes to: its name picks it."""
    return partition_streams(topic, partitions)[partition_for_key(name, partitions)]


async def ticks_in(client: aioredis.Redis, stream: str) -> list[str]:
    return [
        json.loads(fields[b"meta"])["periodic_tick"] for _, fields in await client.xrange(stream)
    ]


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_tick_is_written_once_with_its_claim(
    where: str, topic: str, partitions: int
) -> None:
    stream = tick_stream(topic, partitions, "report")
    deployment = connect(where)
    client = deployment.client_for(stream)
    claim: dict[str, Any] = {"lease": 5.0, "window": 60.0}
    try:
        mine = await claim_tick(client, stream, "report", TICK, mode="new", owner="a", **claim)
        theirs = await claim_tick(client, stream, "report", TICK, mode="new", owner="b", **claim)
        assert mine.held and not theirs.held and not theirs.finished and theirs.wait > 4
        entry: Fields = {"type": "report", "data": "1"}
        first = await publish_tick(client, stream, "report", TICK, entry, make_stream=True)
        # a retry after a lost reply, or a claimer overtaken by another: nothing added
        again = await publish_tick(client, stream, "report", TICK, entry, make_stream=True)
        assert first.added and first.entry_id is not None
        assert not again.added and again.entry_id == first.entry_id
        assert await client.xlen(stream) == 1
        assert await last_published(client, stream, "report") == TICK
        rescue = await claim_tick(client, stream, "report", TICK, mode="rescue", owner="b", **claim)
        assert rescue.finished and not rescue.held

        skipped = TICK + 60_000  # the function raised: the claimer gave the tick up
        await claim_tick(client, stream, "report", skipped, mode="new", owner="a", **claim)
        assert (
            await claim_tick(client, stream, "report", skipped, mode="skip", owner="a", **claim)
        ).finished
        assert (await publish_tick(client, stream, "report", skipped, entry, make_stream=True)) \
            .entry_id is None  # fmt: skip
        never = TICK + 120_000  # not claimed, or its window passed: not published
        assert (await publish_tick(client, stream, "report", never, entry, make_stream=True)) \
            .entry_id is None  # fmt: skip
        assert await client.xlen(stream) == 1
        assert await last_published(client, stream, "report") == TICK
        assert await client.hkeys(f"streamq:{{{stream}}}:periodic") == [b"report"]

        # a claim gone (its window passed) of a tick at or before the last published:
        # a process that paused that long does not publish it again
        await client.delete(claim_key(stream, "report", TICK))
        for late in (TICK, TICK - 60_000):
            again_late = await claim_tick(
                client, stream, "report", late, mode="new", owner="b", **claim
            )
            assert again_late.finished and not again_late.held
        assert await client.xlen(stream) == 1
    finally:
        await deployment.aclose()


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_tick_left_by_a_dead_claimer_is_published_once_by_the_running_processes(
    where: str, topic: str, partitions: int
) -> None:
    """A claim whose lease ran out (its process died before publishing) is found by every
    running process; one takes it over, calls the function once, publishes it once."""
    queues = [queue(where, topic, partitions=partitions, consumer=f"c{i}") for i in range(3)]
    calls: Counter[str] = Counter()
    seen: list[Message[str]] = []
    for mq in queues:

        @mq.handler("report")
        async def keep(msg: Message[str]) -> None:
            seen.append(msg)

        @mq.periodic("report", cron="0 0 1 1 *")  # once a year: no tick of its own here
        async def report(mq: Any = mq) -> str:
            calls[mq.consumer] += 1
            return str(mq.consumer)

    stream = tick_stream(topic, partitions, "report")
    deployment = connect(where)
    client = deployment.client_for(stream)
    try:
        ghost = await claim_tick(
            client, stream, "report", TICK, mode="new", owner="ghost", lease=0.001, window=600
        )
        assert ghost.held
        async with queues[0].running(), queues[1].running(), queues[2].running():
            await wait_for(lambda: len(seen) >= 1, what="the dead claimer's tick published")
            done = await client.get(claim_key(stream, "report", TICK))
            assert done is not None and done.startswith(b"done "), done
        assert await ticks_in(client, stream) == [tick_time(TICK)]
        assert sum(calls.values()) == 1, calls
        assert seen[0].data in calls and seen[0].meta["periodic_tick"] == tick_time(TICK)
    finally:
        await deployment.aclose()


def _wait_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The next line ``process`` prints; fails the test after ``timeout``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        pytest.fail(f"no line from the claimer within {timeout}s")
    return process.stdout.readline()


def _ticks(r: redis.Redis, stream: str) -> list[tuple[str, str]]:
    """(periodic_tick, the process that published it) of every entry of ``stream``."""
    return [
        (json.loads(f[b"meta"])["periodic_tick"], json.loads(f[b"data"])["from"])
        for _, f in r.xrange(stream)
    ]


def _poll(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; any still running after it is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.slow
def test_a_claimer_killed_before_its_publish_leaves_the_tick_to_another_process(
    where: str, topic: str, redis_url: str, processes: list[subprocess.Popen[str]]
) -> None:
    """The worst moment: the claimer won the tick, ran the function, built the entry and is
    about to write it (its publish middleware hangs there) when it is killed (SIGKILL).
    The two other processes publish that tick, once, as soon as its lease runs out."""
    partitions = 1 if where == redis_url else 4
    stream = tick_stream(topic, partitions, "tick")
    command = [sys.executable, "-m", "tests.helpers.periodic_process", where, topic]
    victim = subprocess.Popen(
        [*command, "victim", "120", str(partitions), "hang"], stdout=subprocess.PIPE, text=True
    )
    processes.append(victim)
    line = _wait_line(victim, 30)
    assert line.startswith("hanging "), line
    hung_tick = line.split()[1]
    processes += [
        subprocess.Popen([*command, name, "120", str(partitions)], text=True)
        for name in ("s1", "s2")
    ]
    with sync_client(where, stream) as r:
        _poll(lambda: len(_ticks(r, stream)) >= 3, 30, "the other processes' ticks")
        assert hung_tick not in [t for t, _ in _ticks(r, stream)]  # the victim lives on
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        _poll(lambda: hung_tick in [t for t, _ in _ticks(r, stream)], 30, "the victim's tick")
        for survivor in processes[1:]:
            survivor.send_signal(signal.SIGTERM)
        for survivor in processes[1:]:
            assert survivor.wait(timeout=30) == 0
        ticks = _ticks(r, stream)
    counts = Counter(t for t, _ in ticks)
    assert counts[hung_tick] == 1, counts[hung_tick]
    assert max(counts.values()) == 1, counts.most_common(3)
    assert {sender for t, sender in ticks if t == hung_tick} <= {"s1", "s2"}
