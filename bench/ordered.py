"""Ordered-mode figures: ``python -m bench.ordered [URL] [N]``.

* ``ordered_consume``: one consumer drains N entries of a topic of 8 partitions, with
  no-op handlers, in ordered mode, as a ratio to shared mode measured the same way in the
  same round (three rounds, interleaved; the median ratio; goal >= 0.7);
  ``ordered_consume_1ms``: the same with 1 ms handlers over 200 keys (goal >= 0.8:
  concurrency across keys must hold).
* ``rebalance_pause_ms``: entries are published to every partition every 5 ms while one
  ordered consumer runs; a second joins; the longest gap between two handled entries of a
  partition that moved (``"when": "join"``, goal: under 1 s). Then for a death: two ordered
  consumers share the partitions, one in a process of its own (bench/ordered_consumer.py)
  that is SIGKILLed; the longest time one of its partitions stands still, from the kill
  until the survivor handles an entry of it again (``"when": "death"``, goal: within the
  ownership lease plus 1 s).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import anyio

from streamq import Message, MessageQueue, StartFrom
from streamq.config import env_url

from .workload import fresh_stream

PARTITIONS = 8
LEASE = 4.0  # ownership_lease: a SIGKILLed consumer's partitions move after this
READY_WITHIN = 60.0
PUBLISH_EVERY = 0.005


def bench_queue(url: str, topic: str, consumer: str, *, ordered: bool = True) -> MessageQueue:
    """A queue of the figures' topic (bench/ordered_consumer.py uses it too)."""
    return MessageQueue(url, stream=topic, group="bench", consumer=consumer,
                        partitions=PARTITIONS, ordered=ordered, start=StartFrom.EARLIEST,
                        ownership_lease=LEASE, block=0.2)  # fmt: skip


async def consume_rate(url: str, n: int, *, ordered: bool, keys: int, delay: float) -> float:
    """Entries per second for one consumer draining ``n`` entries (``delay``: handler time)."""
    topic = fresh_stream("ordered" if ordered else "shared")
    mq = bench_queue(url, topic, "c1", ordered=ordered)
    handled = 0
    done = anyio.Event()

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        nonlocal handled
        if delay:
            await anyio.sleep(delay)
        handled += 1
        if handled == n:
            done.set()

    async with mq:
        for start in range(0, n, 5000):
            items = list(range(start, min(n, start + 5000)))
            await mq.publish_many("job", items, key=lambda i: f"k{i % keys}")
        started = time.perf_counter()
        async with mq.running():
            await done.wait()
        elapsed = time.perf_counter() - started
        await mq.terminate_topic()
    return n / elapsed


async def rebalance_pause_ms(url: str, seconds: float = 3.0) -> float:
    topic = fresh_stream("rebalance")
    first, second = (bench_queue(url, topic, f"c{i}") for i in (1, 2))
    last_seen: dict[int, float] = {}
    gaps: dict[int, float] = defaultdict(float)
    joined_at = [0.0]

    for mq in (first, second):

        @mq.handler("job")
        async def handle(msg: Message[int]) -> None:
            now = time.perf_counter()
            if joined_at[0] and msg.partition in last_seen:
                gaps[msg.partition] = max(gaps[msg.partition], now - last_seen[msg.partition])
            last_seen[msg.partition] = now

    async with first, second, first.running():
        await anyio.sleep(1.0)  # it owns every partition
        async with anyio.create_task_group() as tg:
            tg.start_soon(_publish, first, time.perf_counter() + seconds)
            await anyio.sleep(0.5)
            joined_at[0] = time.perf_counter()
            async with second.running():
                await anyio.sleep(seconds)
                moved = second.stats().get("owned_partitions", [])
        await first.terminate_topic()
    return 1000 * max((gaps[p] for p in moved), default=float("nan"))


async def death_pause_ms(url: str) -> float:
    """The longest time a SIGKILLed consumer's partitions stand still (see the module's
    docstring); the clock starts at the kill (its last entries were handled within a
    publishing round, 5 ms, before it)."""
    topic = fresh_stream("death")
    survivor = bench_queue(url, topic, "c1")
    killed_at, moved = 0.0, set[int]()
    first_after: dict[int, float] = {}  # partition -> its first entry handled after the kill
    all_back = anyio.Event()

    @survivor.handler("job")
    async def handle(msg: Message[int]) -> None:
        if killed_at and msg.partition not in first_after:
            first_after[msg.partition] = time.perf_counter()
            if moved <= first_after.keys():
                all_back.set()

    async with survivor, survivor.running():
        victim = await anyio.open_process(
            [sys.executable, "-m", "bench.ordered_consumer", url, topic, "c2"],
            stdout=subprocess.PIPE, stderr=None,
        )  # fmt: skip
        try:
            assert victim.stdout is not None
            with anyio.fail_after(READY_WITHIN):
                line = await victim.stdout.receive()
                assert line.startswith(b"ready"), f"bench consumer not ready: {line!r}"
                await _until_shared_by_two(survivor)
            moved = set(range(PARTITIONS)) - set(survivor.stats()["owned_partitions"])
            async with anyio.create_task_group() as tg:
                tg.start_soon(_publish, survivor, float("inf"))
                await anyio.sleep(0.5)
                victim.kill()
                killed_at = time.perf_counter()
                with anyio.fail_after(LEASE + 10):
                    await all_back.wait()
                tg.cancel_scope.cancel()
        finally:
            if victim.returncode is None:
                victim.kill()
            await victim.wait()
        await survivor.terminate_topic()
    return 1000 * max(first_after[p] - killed_at for p in moved)


async def _until_shared_by_two(mq: MessageQueue) -> None:
    """Until ``mq`` owns half of the partitions and another consumer the others."""
    while True:
        owners = await mq.partition_owners()
        mine = set(mq.stats()["owned_partitions"])
        if len(mine) == PARTITIONS // 2 and all(owner is not None for owner in owners):
            return
        await anyio.sleep(0.05)


async def _publish(mq: MessageQueue, until: float) -> None:
    """One entry to every partition every 5 ms until ``until`` (perf_counter)."""
    while time.perf_counter() < until:
        for p in range(PARTITIONS):
            await mq.publish("job", p, key=_key_for(p))
        await anyio.sleep(PUBLISH_EVERY)


_KEYS: dict[int, str] = {}


def _key_for(partition: int) -> str:
    """A key that lands on ``partition`` (found once)."""
    from streamq.topic.partitions import partition_for_key

    if not _KEYS:
        i = 0
        while len(_KEYS) < PARTITIONS:
            _KEYS.setdefault(partition_for_key(f"key{i}", PARTITIONS), f"key{i}")
            i += 1
    return _KEYS[partition]


ROUNDS = 3


async def paired_rates(
    url: str, n: int, delay: float, rounds: int = ROUNDS
) -> tuple[list[float], list[float]]:
    """Ordered and shared mode ``rounds`` times each, interleaved, so that the machine's
    drift hits both alike: (ordered rates, shared rates)."""
    ordered, shared = [], []
    for _ in range(rounds):
        shared.append(await consume_rate(url, n, ordered=False, keys=200, delay=delay))
        ordered.append(await consume_rate(url, n, ordered=True, keys=200, delay=delay))
    return ordered, shared


async def main(url: str, n: int) -> None:
    """One JSON line per figure; a throughput as the median over rounds of its ratio to
    shared mode in the same round."""
    _emit("ordered_consume", n, *await paired_rates(url, n, 0))
    slow = max(n // 10, 1000)
    _emit("ordered_consume_1ms", slow, *await paired_rates(url, slow, 0.001))
    pause = await rebalance_pause_ms(url)
    print(json.dumps({"bench": "rebalance_pause_ms", "when": "join", "value": round(pause)}),
          flush=True)  # fmt: skip
    pause = await death_pause_ms(url)
    print(json.dumps({"bench": "rebalance_pause_ms", "when": "death", "value": round(pause),
                      "ownership_lease_ms": round(LEASE * 1000)}), flush=True)  # fmt: skip


def _emit(name: str, msgs: int, ordered: list[float], shared: list[float]) -> None:
    ratio = statistics.median(o / s for o, s in zip(ordered, shared, strict=True))
    print(json.dumps({
        "bench": name, "msgs": msgs, "partitions": PARTITIONS, "keys": 200,
        "msgs_per_s": round(max(ordered)), "shared_msgs_per_s": round(max(shared)),
        "ratio_to_shared": round(ratio, 3), "runs": [round(r) for r in ordered],
        "shared_runs": [round(r) for r in shared],
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else (env_url() or "")
    if not url:
        from streamq.server.single import default_url

        url = default_url()
    anyio.run(main, url, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
