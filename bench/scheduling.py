"""Scheduled-delivery figures (DESIGN.md, "Benchmarks"); ``python -m bench.scheduling``
runs them alone, ``make bench`` with the others.

* ``schedule_publish``: ``publish(..., delay=3600)`` one awaited at a time, next to
  ``publish_single`` in the same round (``ratio_to_publish_single``).
* ``scheduled_move_100k``: 100,000 messages fall due at once under one running consumer:
  messages added to the stream per second, from the due time until the last is in.
* ``scheduled_lateness_p50_ms`` / ``_p99_ms``: a producer process schedules 2,000 msg/s,
  each due 0.5 s later; lateness = the handler's start minus the message's ``due_at``.
* ``scheduled_memory_per_1m_mb``: the server's ``used_memory`` grown by scheduling
  200,000 messages (the workload's 100-byte payloads), scaled to a million.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from streamq import Message, StartFrom

from .publishing import publish_single
from .workload import (
    Email,
    discard_queue,
    figures_cli,
    fresh_stream,
    noop_consumer,
    payload,
    queue,
)

Emit = Any


async def schedule_publish(url: str, n: int) -> float:
    mq = queue(url, fresh_stream("sched1"))
    t0 = time.perf_counter()
    for i in range(n):
        await mq.publish("email", payload(i), delay=3600)
    elapsed = time.perf_counter() - t0
    await mq.terminate_topic()
    await mq.aclose()
    return n / elapsed


async def move_all_due(url: str, n: int) -> float:
    mq = queue(url, fresh_stream("schedmove"))
    noop_consumer(mq)
    due = datetime.now(UTC) + timedelta(seconds=5 + n / 5_000)  # time to schedule them all
    await mq.publish_many("email", [payload(i) for i in range(n)], at=due)
    if datetime.now(UTC) >= due:
        raise RuntimeError("scheduling took longer than the figure allows: not measured")
    async with mq.running():
        # polled: the figure is the stream's length, not an event of this process
        while await mq.client.xlen(mq.stream) < n:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        done = time.time()
        await mq.terminate_topic()
    return n / (done - due.timestamp())


async def lateness(url: str, rate: int, seconds: float) -> tuple[float, float]:
    mq = queue(url, fresh_stream("schedlate"), start=StartFrom.LATEST, block=0.1)
    total = int(rate * seconds)
    samples: list[float] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        due = datetime.fromisoformat(msg.meta["due_at"]).timestamp()
        samples.append((time.time() - due) * 1000)
        if len(samples) == total:
            await mq.stop()

    command = [sys.executable, "-m", "bench.scheduled_producer", url, mq.stream, str(rate),
               str(total), "0.5"]  # fmt: skip
    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(mq.run, handle_signals=False))
        await anyio.sleep(0.2)
        await anyio.run_process(command, check=True)
        with anyio.fail_after(30):
            await mq.done.wait()
        await mq.terminate_topic()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def memory_per_million_mb(url: str, n: int = 200_000) -> float:
    mq = queue(url, fresh_stream("schedmem"))
    before = int((await mq.client.info("memory"))["used_memory"])
    await mq.publish_many("email", [payload(i) for i in range(n)], delay=3600)
    after = int((await mq.client.info("memory"))["used_memory"])
    await mq.terminate_topic()
    await discard_queue(mq)
    return (after - before) / n * 1_000_000 / 2**20


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    n = 2000 if quick else 5000
    scheduled: list[float] = []
    plain: list[float] = []
    for _ in range(rounds):
        plain.append(await publish_single(url, n))
        scheduled.append(await schedule_publish(url, n))
    ratio = statistics.median(s / p for s, p in zip(scheduled, plain, strict=True))
    emit(bench="schedule_publish", msgs=n, msgs_per_s=round(max(scheduled)),
         ratio_to_publish_single=round(ratio, 3), runs=[round(r) for r in scheduled])  # fmt: skip
    moved = 20_000 if quick else 100_000
    emit(bench=f"scheduled_move_{moved // 1000}k", msgs=moved,
         msgs_per_s=round(await move_all_due(url, moved)))  # fmt: skip
    p50, p99 = await lateness(url, 2000, 2.0 if quick else 5.0)
    emit(bench="scheduled_lateness_p50_ms", rate=2000, value=round(p50, 3))
    emit(bench="scheduled_lateness_p99_ms", rate=2000, value=round(p99, 3))
    emit(bench="scheduled_memory_per_1m_mb", measured_msgs=200_000,
         value=round(await memory_per_million_mb(url), 1))  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq scheduling benchmarks (JSON lines)", figures)
