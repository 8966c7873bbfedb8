"""Request-reply figures (DESIGN.md, "Benchmarks"); ``python -m bench.requests`` runs them
alone, ``make bench`` with the others.

* ``request_reply_p50_ms`` / ``_p99_ms``: ``mq.request(...)`` started at a steady 1,000
  requests a second (each in its own task, so they overlap as a service's would) for 5 s
  (2 s with ``--quick``), answered by a consumer of the same process: the time from the
  call to its reply, on loopback. Goal: p99 ≤ 5 ms.
* ``request_reply_2proc_p50_ms`` / ``_p99_ms``: the same requests answered by a service in
  a process of its own (``bench.responder_proc``), as between two services: the
  requesting process does only its side.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from typing import Any

import anyio

from streamq import Message, MessageQueue

from .workload import discard_queue, figures_cli, fresh_stream, queue

Emit = Any
RATE = 1000


async def round_trips(url: str, seconds: float) -> list[float]:
    """Seconds from each request's call to its reply, answered in this process."""
    mq = queue(url, fresh_stream("requests"))

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> int:
        return msg.data * 2

    await mq.open()
    async with mq.running():
        samples = await timed_requests(mq, seconds)
    await discard_queue(mq)
    return samples


async def round_trips_2proc(url: str, seconds: float) -> list[float]:
    """Seconds from each request's call to its reply, answered by another process."""
    stream = fresh_stream("requests-2proc")
    responder = start_responder(url, stream)
    try:
        mq = queue(url, stream, consumer="requester")
        await mq.open()
        samples = await timed_requests(mq, seconds)
        answered = int(responder.communicate("stop\n", timeout=60)[0].split()[-1])
    finally:
        responder.kill()
    assert answered >= len(samples), f"the responder answered {answered} of {len(samples)}"
    await discard_queue(mq)
    return samples


def start_responder(url: str, stream: str) -> subprocess.Popen[str]:
    """The answering service's process, once it says it is ready."""
    responder = subprocess.Popen(
        [sys.executable, "-m", "bench.responder_proc", url, stream],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert responder.stdout is not None and responder.stdout.readline().strip() == "ready"
    return responder


async def timed_requests(mq: MessageQueue, seconds: float) -> list[float]:
    """Requests at ``RATE`` a second for ``seconds`` after a warm-up: each one's time."""
    samples: list[float] = []

    async def one(n: int) -> None:
        started = time.perf_counter()
        assert await mq.request("quote", n, timeout=10) == n * 2
        samples.append(time.perf_counter() - started)

    for n in range(200):  # warm up: connections, scripts loaded, the reader started
        await mq.request("quote", n, timeout=10)
    async with anyio.create_task_group() as tg:
        start, total = anyio.current_time(), int(seconds * RATE)
        for n in range(total):
            await anyio.sleep_until(start + n / RATE)
            tg.start_soon(one, n)
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
    samples = await round_trips_2proc(url, 2.0 if quick else 5.0)
    emit(bench="request_reply_2proc_p50_ms", rate=RATE, requests=len(samples),
         value=round(statistics.median(samples) * 1000, 3))  # fmt: skip
    emit(bench="request_reply_2proc_p99_ms", rate=RATE, requests=len(samples),
         value=round(nearest_rank(samples, 0.99) * 1000, 3), goal=5.0)  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq request-reply figures (JSON lines)", figures)
