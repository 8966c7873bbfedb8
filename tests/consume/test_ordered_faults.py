"""Ordered mode under faults, with consumer processes: a SIGKILLed owner's partitions move
within the lease plus a second and nothing is lost; a consumer paused (SIGSTOP) past its
lease handles nothing more of its old partitions when it wakes. In both, per key no
handler call ever starts before every earlier entry of its key was handled to completion
(re-runs of an entry whose ack was lost are allowed)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import MessageQueue, StartFrom
from tests.helpers.ordered_consumer import log_key
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS, LEASE = 4, 2.0
KEYS, PER_KEY = 24, 30


def spawn(url: str, topic: str, name: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.ordered_consumer", url, topic, str(PARTITIONS), name,
         str(LEASE)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready", f"consumer {name} did not start"
    return process


@contextmanager
def consumers(url: str, topic: str, *names: str) -> Iterator[dict[str, subprocess.Popen[str]]]:
    procs = {name: spawn(url, topic, name) for name in names}
    try:
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def check_order(calls: list[str], published: dict[str, int]) -> list[tuple[str, ...]]:
    """Per key: each call starts only once every earlier entry was done; every entry done.
    Returns the calls as tuples (kind, key, n, consumer, token, time)."""
    rows = [tuple(c.split("|")) for c in calls]
    done: dict[str, set[int]] = {key: set() for key in published}
    for kind, key, n, *_ in rows:
        if kind == "start":
            missing = set(range(int(n))) - done[key]
            assert not missing, f"{key}: entry {n} started before {sorted(missing)} were done"
        else:
            done[key].add(int(n))
    for key, count in published.items():
        assert done[key] == set(range(count)), f"{key}: lost {set(range(count)) - done[key]}"
    return rows


async def _publisher(url: str, topic: str) -> MessageQueue:
    return MessageQueue(url, stream=topic, group="g", partitions=PARTITIONS,
                        start=StartFrom.EARLIEST)  # fmt: skip


async def _publish(mq: MessageQueue, start: int, stop: int) -> None:
    for n in range(start, stop):
        for k in range(KEYS):
            await mq.publish("job", {"n": n}, key=f"k{k}")


async def _owners(mq: MessageQueue) -> list[str | None]:
    return [None if o is None else o[0] for o in await mq.partition_owners()]


async def test_a_sigkilled_owners_partitions_move_within_the_lease_and_nothing_is_lost(
    redis_url: str, stream: str
) -> None:
    mq = await _publisher(redis_url, stream)
    async with mq:
        await _publish(mq, 0, 10)  # the topic exists before the consumers start
        with consumers(redis_url, stream, "a", "b") as procs:
            await wait_for(lambda: _balanced(mq), what="a and b share the partitions")
            await _publish(mq, 10, 20)
            procs["a"].kill()
            killed = time.monotonic()
            await wait_for(lambda: _all_owned_by(mq, "b"), timeout=LEASE + 5, what="b owns all")
            moved_after = time.monotonic() - killed
            await _publish(mq, 20, PER_KEY)
            client = mq.client
            await wait_for(lambda: _all_done(client, stream), timeout=60, what="all handled")
        calls = [c.decode() for c in await client.lrange(log_key(stream), 0, -1)]
    check_order(calls, {f"k{k}": PER_KEY for k in range(KEYS)})
    assert moved_after <= LEASE + 1.0, f"partitions moved after {moved_after:.2f}s"


async def test_a_consumer_paused_past_its_lease_handles_nothing_more_of_its_partitions(
    redis_url: str, stream: str
) -> None:
    mq = await _publisher(redis_url, stream)
    async with mq:
        await _publish(mq, 0, 10)
        with consumers(redis_url, stream, "a", "b") as procs:
            await wait_for(lambda: _balanced(mq), what="a and b share the partitions")
            tokens_before = await mq.partition_owners()
            # a burst, so that a is paused with entries waiting in its lanes
            items = [{"n": n, "k": k} for n in range(10, 15) for k in range(KEYS)]
            await mq.publish_many("job", items, key=lambda item: f"k{item['k']}")
            await anyio.sleep(0.02)
            procs["a"].send_signal(signal.SIGSTOP)
            await wait_for(lambda: _all_owned_by(mq, "b"), timeout=LEASE + 5, what="b owns all")
            await _publish(mq, 15, 25)  # while a sleeps: b handles these
            client = mq.client
            woken = time.time()  # a call that began before this began before the pause
            procs["a"].send_signal(signal.SIGCONT)
            await _publish(mq, 25, PER_KEY)
            await wait_for(lambda: _all_done(client, stream), timeout=60, what="all handled")
            await wait_for(lambda: _balanced(mq), what="a rejoined")
        calls = [c.decode() for c in await client.lrange(log_key(stream), 0, -1)]
    rows = check_order(calls, {f"k{k}": PER_KEY for k in range(KEYS)})
    old = {o[1] for o in tokens_before if o is not None and o[0] == "a"}
    late = [
        r for r in rows
        if r[0] == "start" and r[3] == "a" and int(r[4]) in old and float(r[5]) >= woken
    ]  # fmt: skip
    assert old and late == [], f"a handled with a lapsed lease after waking: {late[:5]}"


async def _balanced(mq: MessageQueue) -> bool:
    owners = await _owners(mq)
    return sorted(map(str, owners)) == ["a", "a", "b", "b"]


async def _all_owned_by(mq: MessageQueue, name: str) -> bool:
    return await _owners(mq) == [name] * PARTITIONS


async def _all_done(client: aioredis.Redis, topic: str) -> bool:
    calls = await client.lrange(log_key(topic), 0, -1)
    done = {c for c in calls if c.startswith(b"done|")}
    return len({tuple(c.split(b"|")[1:3]) for c in done}) == KEYS * PER_KEY
