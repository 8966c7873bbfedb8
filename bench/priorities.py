"""Priority figures (DESIGN.md, "Flow control" -> Priorities); ``python -m bench.priorities``
runs them alone.

* ``priority_latency_ms``: a topic with ``priorities=3`` holds a backlog of 50,000 low
  entries (10,000 with ``--quick``) that one consumer is draining (handlers await 10 ms,
  ``concurrency=32``: about 3,200 a second, so the backlog lasts); high entries are
  published at 100 a second for 5 s (2 s), and each one's latency is the time from its
  publish to its handler's start. p50, p99 (nearest rank) and max, and how many low
  entries were still waiting when the last high one was handled (goal: p99 <= 50 ms, and
  the backlog not drained first).
* ``priority_low_share``: every level of a topic with ``priorities=3`` holds a backlog
  (20,000 entries each; 10,000 with ``--quick``) that one consumer drains (handlers await 10
  ms, ``concurrency=32``); over 3 s (1.5 s) after a warm-up of 0.5 s, the share of the
  handler starts that went to the low level, against the documented 1/7 (weights 4, 2, 1:
  docs/guides/flow-control.md, "Priorities"), with the starts of each level.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from streamq import Message, MessageQueue

from .workload import figures_cli, fresh_stream, queue

HANDLER_SECONDS = 0.01
RATE = 100  # high entries a second
LEVELS = 3
WEIGHTS = [2 ** (LEVELS - 1 - level) for level in range(LEVELS)]  # 4, 2, 1
SHARE_HANDLER_SECONDS = 0.01
WARM_UP = 0.5


def _percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


async def priority_latency(url: str, quick: bool) -> dict[str, Any]:
    backlog, seconds = (10_000, 2) if quick else (50_000, 5)
    stream = fresh_stream("priorities")
    mq: MessageQueue = queue(url, stream, priorities=3, concurrency=32)
    latencies: list[float] = []
    low_done = 0
    draining, all_high = anyio.Event(), anyio.Event()

    @mq.handler("low")
    async def low(msg: Message[int]) -> None:
        nonlocal low_done
        await anyio.sleep(HANDLER_SECONDS)
        low_done += 1
        if low_done == 100:  # the backlog is being drained
            draining.set()

    @mq.handler("high")
    async def high(msg: Message[float]) -> None:
        latencies.append(time.time() - msg.data)
        if len(latencies) == RATE * seconds:
            all_high.set()

    async with mq:
        for start in range(0, backlog, 10_000):
            await mq.publish_many("low", range(start, start + 10_000), priority=2)
        async with mq.running():
            await draining.wait()
            for _ in range(RATE * seconds):
                await mq.publish("high", time.time(), priority=0)
                await anyio.sleep(1 / RATE)
            await all_high.wait()
            waiting = backlog - low_done
        await mq.terminate_topic()
    ms = [s * 1000 for s in latencies]
    return {
        "bench": "priority_latency_ms", "backlog": backlog, "high": len(ms),
        "p50": round(_percentile(ms, 50), 1), "p99": round(_percentile(ms, 99), 1),
        "max": round(max(ms), 1), "low_waiting_at_end": waiting,
    }  # fmt: skip


async def low_share(url: str, quick: bool) -> dict[str, Any]:
    backlog, seconds = (10_000, 1.5) if quick else (20_000, 3.0)
    stream = fresh_stream("priority-share")
    mq: MessageQueue = queue(url, stream, priorities=LEVELS, concurrency=32)
    started, counted = [0] * LEVELS, [0] * LEVELS
    counting = False

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        assert msg.priority is not None
        started[msg.priority] += 1
        if counting:
            counted[msg.priority] += 1
        await anyio.sleep(SHARE_HANDLER_SECONDS)

    async with mq:
        for level in range(LEVELS):
            for start in range(0, backlog, 10_000):
                chunk = range(start, min(start + 10_000, backlog))
                await mq.publish_many("job", chunk, priority=level)
        async with mq.running():
            await anyio.sleep(WARM_UP)
            counting = True
            await anyio.sleep(seconds)
            counting = False
            left = [backlog - n for n in started]
        await mq.terminate_topic()
    if min(left) <= 0:
        raise RuntimeError(f"a level ran out of entries while counted ({left} left): not measured")
    documented = WEIGHTS[-1] / sum(WEIGHTS)
    share = counted[-1] / max(sum(counted), 1)
    return {
        "bench": "priority_low_share", "levels": LEVELS, "seconds": seconds,
        "starts_per_level": counted, "left_per_level": left, "value": round(share, 3),
        "documented": round(documented, 3), "ratio_to_documented": round(share / documented, 3),
    }  # fmt: skip


async def figures(url: str, quick: bool, rounds: int, emit: Callable[..., None]) -> None:
    emit(**await priority_latency(url, quick))
    emit(**await low_share(url, quick))


if __name__ == "__main__":
    figures_cli(__doc__ or "", figures)
