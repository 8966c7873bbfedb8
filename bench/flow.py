"""Flow-control figures (DESIGN.md, "Flow control" and "Benchmarks"); ``python -m
bench.flow`` runs them alone, ``make bench`` with the others.

* ``rate_limit_accuracy``: 3 consumer processes of one group (bench/flow_consumer.py)
  drain a backlog under ``RateLimit(500, per=1.0)`` for 20 s (5 s with ``--quick``):
  handler calls started in each whole clock second between the go and the stop, all
  processes together (min, max, the worst deviation from 500; goal: within 5% in every
  second).
* ``rate_limit_per_key``: the same 3 processes under ``RateLimit(10, by="key")`` over 5
  keys for 10 s (4 s): the most calls of one key started in a whole clock second (goal:
  never above 10), and in any sliding window of one second (for information).
* ``rate_limit_overhead``: one consumer drains the workload one entry per handler call
  under ``RateLimit(10_000_000)``, a limit that never binds, as a ratio to the same run
  without a limit in the same pair (the median over at least 5 pairs, after a drain that
  is not counted, each of the two first in every other pair: goal >= 0.9); and the CPU
  time per entry of both processes (this one and the server), the unlimited run's over the
  limited one's (``cpu_ratio_to_unlimited``): the wall clock swings with the machine's
  load, CPU time much less.
* ``pause_latency_ms``: 3 consumer processes drain a backlog (handlers await 5 ms); the
  group is paused and resumed again and again; for each pause and each process, the time
  from the call of ``pause()`` to the last handler call that process started after it.
  p50, p99 (nearest rank) and max over every sample (goal: p99 <= 1 s).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import redis.asyncio as aioredis

from streamq import RateLimit
from streamq.message import encode_entry

from .consuming import tell
from .workload import (
    discard,
    drain_rate,
    figures_cli,
    fresh_stream,
    payload,
    prefill,
    queue,
    xadd_pipeline,
)

Emit = Any
Starts = list[list[tuple[float, str | None]]]  # per process: (start time, publish key)

PROCESSES = 3
TYPE_LIMIT, KEY_LIMIT, KEYS = 500, 10, 5
GENEROUS = RateLimit(10_000_000)  # far above what one process can handle: never binds
OVERHEAD_PAIRS = 5  # at least: a pair swings with the machine, the median of five less
RUNNING, PAUSED = 1.0, 3.0  # seconds of each pause cycle before the pause, and paused


def start(url: str, stream: str, limit: str) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "bench.flow_consumer", url, stream]
    children = [
        subprocess.Popen(
            [*command, f"proc-{k}", limit], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for k in range(PROCESSES)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return children


async def run_consumers(
    url: str, stream: str, limit: str, during: Callable[[], Awaitable[None]]
) -> tuple[Starts, float, float]:
    """Run the consumer processes from "go" until ``during()`` returns: (each process's
    handler starts, the time of the go, the time of the stop)."""
    children = start(url, stream, limit)
    try:
        go = time.time()
        tell(children, "go")
        await during()
        stop = time.time()
        tell(children, "stop")
        outs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            child.kill()
    starts = [[(t, key) for t, key in json.loads(out.splitlines()[-1])] for out in outs]
    return starts, go, stop


def whole_seconds(times: list[float], go: float, stop: float) -> list[int]:
    """Calls started in each whole clock second that lies between ``go`` and ``stop``."""
    counts = Counter(int(t) for t in times)
    return [counts[s] for s in range(math.ceil(go), int(stop))]


async def prefill_keys(url: str, stream: str, n: int, keys: int) -> None:
    client = aioredis.Redis.from_url(url)
    rows = [encode_entry("email", payload(i), key=f"k{i % keys}") for i in range(n)]
    for first in range(0, n, 2000):
        await xadd_pipeline(client, stream, rows[first : first + 2000]).execute()
    await client.aclose()


async def type_accuracy(url: str, seconds: float) -> dict[str, Any]:
    stream = fresh_stream("rate")
    await prefill(url, stream, int(TYPE_LIMIT * (seconds + 5)))
    starts, go, stop = await run_consumers(url, stream, "type", lambda: anyio.sleep(seconds))
    await discard(aioredis.Redis.from_url(url), stream)
    counts = whole_seconds([t for proc in starts for t, _ in proc], go, stop)
    worst = max(abs(c - TYPE_LIMIT) for c in counts) / TYPE_LIMIT
    return {
        "limit": TYPE_LIMIT, "processes": PROCESSES, "seconds": len(counts),
        "min_per_s": min(counts), "max_per_s": max(counts),
        "worst_deviation_pct": round(worst * 100, 2), "goal_pct": 5.0,
        "per_process": [len(proc) for proc in starts], "per_s": counts,
    }  # fmt: skip


async def key_accuracy(url: str, seconds: float) -> dict[str, Any]:
    stream = fresh_stream("keyrate")
    await prefill_keys(url, stream, int(KEY_LIMIT * KEYS * (seconds + 5)), KEYS)
    starts, go, stop = await run_consumers(url, stream, "key", lambda: anyio.sleep(seconds))
    await discard(aioredis.Redis.from_url(url), stream)
    by_key: dict[str | None, list[float]] = {}
    for proc in starts:
        for t, key in proc:
            by_key.setdefault(key, []).append(t)
    counts = {key: whole_seconds(times, go, stop) for key, times in by_key.items()}
    return {
        "limit": KEY_LIMIT, "keys": len(by_key), "processes": PROCESSES,
        "seconds": len(next(iter(counts.values()))),
        "max_per_s": max(max(c) for c in counts.values()),
        "min_per_s": min(min(c) for c in counts.values()),
        "max_sliding_1s": max(sliding_max(sorted(times)) for times in by_key.values()),
    }  # fmt: skip


def sliding_max(times: list[float], window: float = 1.0) -> int:
    """The most of ``times`` (sorted) within any half-open window of ``window`` seconds."""
    most, first = 0, 0
    for last, t in enumerate(times):
        while times[first] <= t - window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def consume_one_by_one(url: str, n: int, limited: bool, cpu: list[float]) -> float:
    if limited:
        return await drain_rate(url, "limited", n, cpu, rate_limits={"email": GENEROUS})
    return await drain_rate(url, "unlimited", n, cpu)


async def rate_limit_overhead(url: str, n: int, rounds: int) -> dict[str, Any]:
    """The ``rate_limit_overhead`` figure: drains of ``n`` entries with and without a limit
    that never binds, in pairs (see the module's docstring)."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    await consume_one_by_one(url, n, True, [])  # warm-up (the process's first drain is slow)
    for pair in range(max(rounds, OVERHEAD_PAIRS)):  # the machine's drift hits both alike:
        for limited in (False, True) if pair % 2 else (True, False):  # each goes first by turns
            rates[limited].append(await consume_one_by_one(url, n, limited, cpu[limited]))
    ratio = statistics.median(a / b for a, b in zip(rates[True], rates[False], strict=True))
    # CPU: the unlimited run's time over the limited one's, so that above 1 is better too
    cpu_ratio = statistics.median(u / lim for u, lim in zip(cpu[False], cpu[True], strict=True))
    return dict(
        bench="rate_limit_overhead", msgs=n, msgs_per_s=round(max(rates[True])),
        unlimited_msgs_per_s=round(max(rates[False])), ratio_to_unlimited=round(ratio, 3),
        cpu_us_per_msg=round(statistics.median(cpu[True]), 1),
        cpu_ratio_to_unlimited=round(cpu_ratio, 3),
        runs=[round(r) for r in rates[True]], unlimited_runs=[round(r) for r in rates[False]],
        goal=0.9,
    )  # fmt: skip


async def pause_latency(url: str, cycles: int) -> list[float]:
    """Seconds from each ``pause()`` call to the last handler call a process started after
    it, for every pause and every process."""
    stream = fresh_stream("pause")
    await prefill(url, stream, cycles * 25_000 + 20_000)
    admin = queue(url, stream)
    pauses: list[float] = []

    async def pause_and_resume() -> None:
        async with admin:
            for _ in range(cycles):
                await anyio.sleep(RUNNING)
                pauses.append(time.time())
                await admin.pause()
                await anyio.sleep(PAUSED)
                await admin.resume()

    starts, _, _ = await run_consumers(url, stream, "none", pause_and_resume)
    samples = []
    for paused_at in pauses:
        for proc in starts:
            if not any(paused_at - 0.2 <= t < paused_at for t, _ in proc):
                raise RuntimeError("a consumer idled before a pause (backlog gone?): not measured")
            after = [t for t, _ in proc if paused_at <= t < paused_at + PAUSED]
            samples.append(max(after, default=paused_at) - paused_at)
    await discard(aioredis.Redis.from_url(url), stream)
    return samples


def nearest_rank(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    emit(bench="rate_limit_accuracy", **await type_accuracy(url, 5.0 if quick else 20.0))
    emit(bench="rate_limit_per_key", **await key_accuracy(url, 4.0 if quick else 10.0))
    emit(**await rate_limit_overhead(url, 10_000 if quick else 50_000, rounds))
    samples = await pause_latency(url, 3 if quick else 8)
    emit(bench="pause_latency_ms", processes=PROCESSES, samples=len(samples),
         p50=round(statistics.median(samples) * 1000, 1),
         value=round(nearest_rank(samples, 0.99) * 1000, 1),
         max=round(max(samples) * 1000, 1), goal=1000)  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq flow-control benchmarks (JSON lines)", figures)
