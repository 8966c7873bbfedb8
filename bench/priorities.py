"""Priority figures (DESIGN.md, "Flow control" -> Priorities); ``python -m bench.priorities``
runs them alone.

* ``priority_latency_ms``: a topic with ``priorities=3`` holds a backlog of 50,000 low
  entries (10,000 with ``--quick``) that one consumer is draining (handlers await 10 ms,
  ``concurrency=32``: about 3,200 a second, so the backlog lasts); high entries are
  published at 100 a second for 5 s (2 s), and each one's latency is the time from its
  publish to its handler's start. p50, p99 (nearest rank) and max, and how many low
  entries were still waiting when the last high one was handled (goal: p99 <= 50 ms, and
  the backlog not drained first).
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
        "figure": "priority_latency_ms", "backlog": backlog, "high": len(ms),
        "p50": round(_percentile(ms, 50), 1), "p99": round(_percentile(ms, 99), 1),
        "max": round(max(ms), 1), "low_waiting_at_end": waiting,
    }  # fmt: skip


async def figures(url: str, quick: bool, rounds: int, emit: Callable[..., None]) -> None:
    for _ in range(1 if quick else rounds):
        emit(**await priority_latency(url, quick))


if __name__ == "__main__":
    figures_cli(__doc__ or "", figures)
