"""Ordered-mode figures: ``python -m bench.ordered [URL] [N]``.

* ``ordered_consume``: one consumer drains N entries of a topic of 8 partitions, with
  no-op handlers, in ordered mode, as a ratio to shared mode measured the same way in the
  same run (goal >= 0.7); ``ordered_consume_1ms``: the same with 1 ms handlers over 200
  keys (goal >= 0.8: concurrency across keys must hold).
* ``rebalance_pause_ms``: entries are published to every partition every 5 ms while one
  ordered consumer runs; a second joins; the longest gap between two handled entries of a
  partition that moved (goal: under 1 s).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

import anyio

from streamq import Message, MessageQueue, StartFrom
from streamq.config import env_url

from .workload import fresh_stream

PARTITIONS = 8


def _queue(url: str, topic: str, consumer: str, *, ordered: bool) -> MessageQueue:
    return MessageQueue(url, stream=topic, group="bench", consumer=consumer,
                        partitions=PARTITIONS, ordered=ordered, start=StartFrom.EARLIEST,
                        ownership_lease=4.0, block=0.2)  # fmt: skip


async def consume_rate(url: str, n: int, *, ordered: bool, keys: int, delay: float) -> float:
    """Entries per second for one consumer draining ``n`` entries (``delay``: handler time)."""
    topic = fresh_stream("ordered" if ordered else "shared")
    mq = _queue(url, topic, "c1", ordered=ordered)
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
    first, second = (_queue(url, topic, f"c{i}", ordered=True) for i in (1, 2))
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

    async def publish(until: float) -> None:
        while time.perf_counter() < until:
            for p in range(PARTITIONS):
                await first.publish("job", p, key=_key_for(p))
            await anyio.sleep(0.005)

    async with first, second, first.running():
        await anyio.sleep(1.0)  # it owns every partition
        async with anyio.create_task_group() as tg:
            tg.start_soon(publish, time.perf_counter() + seconds)
            await anyio.sleep(0.5)
            joined_at[0] = time.perf_counter()
            async with second.running():
                await anyio.sleep(seconds)
                moved = second.stats().get("owned_partitions", [])
        await first.terminate_topic()
    return 1000 * max((gaps[p] for p in moved), default=float("nan"))


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


async def main(url: str, n: int) -> None:
    """One JSON line per figure, each with its ratio to shared mode in the same run."""
    shared = await consume_rate(url, n, ordered=False, keys=200, delay=0)
    ordered = await consume_rate(url, n, ordered=True, keys=200, delay=0)
    _emit("ordered_consume", n, ordered, shared)
    slow = max(n // 10, 1000)
    shared = await consume_rate(url, slow, ordered=False, keys=200, delay=0.001)
    ordered = await consume_rate(url, slow, ordered=True, keys=200, delay=0.001)
    _emit("ordered_consume_1ms", slow, ordered, shared)
    pause = await rebalance_pause_ms(url)
    print(json.dumps({"bench": "rebalance_pause_ms", "when": "join", "value": round(pause)}))


def _emit(name: str, msgs: int, ordered: float, shared: float) -> None:
    print(json.dumps({
        "bench": name, "msgs": msgs, "partitions": PARTITIONS, "keys": 200,
        "msgs_per_s": round(ordered), "shared_msgs_per_s": round(shared),
        "ratio_to_shared": round(ordered / shared, 3),
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else (env_url() or "")
    if not url:
        from streamq.server.single import default_url

        url = default_url()
    anyio.run(main, url, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
