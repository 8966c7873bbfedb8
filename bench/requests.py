"""Request-reply figures (DESIGN.md, "Benchmarks"); ``python -m bench.requests`` runs them
alone, ``make bench`` with the others.

* ``request_reply_p50_ms`` / ``_p99_ms``: ``mq.request(...)`` started at a steady 1,000
  requests a second (each in its own task, so they overlap as a service's would) for 5 s
  (2 s with ``--quick``), answered by a consumer of the same process: the time from the
  call to its reply, on loopback. Goal: p99 ≤ 5 ms.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import anyio

from streamq import Message

from .workload import discard_queue, figures_cli, fresh_stream, queue

Emit = Any
RATE = 1000


async def round_trips(url: str, seconds: float) -> list[float]:
    """Seconds from each request's call to its reply."""
    mq = queue(url, fresh_stream("requests"))

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> int:
        return msg.data * 2

    samples: list[float] = []

    async def one(n: int) -> None:
        started = time.perf_counter()
        assert await mq.request("quote", n, timeout=10) == n * 2
        samples.append(time.perf_counter() - started)

    await mq.open()
    async with mq.running():
        for n in range(200):  # warm up: connections, scripts loaded, the reader started
            await mq.request("quote", n, timeout=10)
        async with anyio.create_task_group() as tg:
            start, total = anyio.current_time(), int(seconds * RATE)
            for n in range(total):
                await anyio.sleep_until(start + n / RATE)
                tg.start_soon(one, n)
    await discard_queue(mq)
    return samples


def nearest_rank(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    samples = await round_trips(url, 2.0 if quick else 5.0)
    emit(bench="request_reply_p50_ms", rate=RATE, requests=len(samples),
         value=round(statistics.median(samples) * 1000, 3))  # fmt: skip
    emit(bench="request_reply_p99_ms", rate=RATE, requests=len(samples),
         value=round(nearest_rank(samples, 0.99) * 1000, 3), goal=5.0)  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq request-reply figures (JSON lines)", figures)
