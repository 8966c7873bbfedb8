"""Consuming figures beyond one process's throughput.

* ``consume_processes``: N consumer processes of one group drain a prefilled stream (the
  clock runs from "go" to the group having nothing pending and nothing left to read);
  ``consume_2proc`` is two of them, given as a ratio to one process measured the same way.
* ``claim_latency``: a consumer dies holding entries; how long after those entries became
  claimable (idle ``claim_idle``) a live consumer of the group has handled them all.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time

import anyio
import redis.asyncio as aioredis

from streamq import Message, StartFrom

from .workload import Email, discard, fresh_stream, prefill, queue

POLL = 0.002  # seconds between looks at the group while processes drain it


async def drained(client: aioredis.Redis, stream: str, group: str) -> bool:
    for info in await client.xinfo_groups(stream):
        if info["name"].decode() == group:
            return int(info["pending"]) == 0 and info.get("lag") == 0
    return False


def start_consumers(url: str, stream: str, processes: int) -> list[subprocess.Popen[str]]:
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.consumer_proc", url, stream, f"proc-{k}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(processes)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return children


def tell(children: list[subprocess.Popen[str]], word: str) -> None:
    for child in children:
        assert child.stdin is not None
        child.stdin.write(word + "\n")
        child.stdin.flush()


async def consume_processes(url: str, n: int, processes: int) -> float:
    stream = fresh_stream(f"proc{processes}")
    await prefill(url, stream, n)
    client = aioredis.Redis.from_url(url)
    children = start_consumers(url, stream, processes)
    try:
        t0 = time.perf_counter()
        tell(children, "go")
        while not await drained(client, stream, "bench"):  # noqa: ASYNC110  # another process
            await anyio.sleep(POLL)
        elapsed = time.perf_counter() - t0
        tell(children, "stop")
        counts = [int(child.communicate(timeout=60)[0].split()[-1]) for child in children]
    finally:
        for child in children:
            child.kill()
    assert sum(counts) == n, f"{processes} processes handled {counts}, not {n} in all"
    await discard(client, stream)
    return n / elapsed


async def claim_latency(
    url: str, n: int = 200, idle: float = 1.0, interval: float = 0.5
) -> tuple[float, float]:
    """(ms from claimable to the first handled, to the last handled) for ``n`` entries read
    by a consumer that then died (``n`` below ``max_in_flight``: one claim pass can take all)."""
    stream = fresh_stream("claim")
    await prefill(url, stream, n)
    client = aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, "bench", id="0")
    await client.xreadgroup("bench", "dead", {stream: ">"}, count=n)
    claimable = time.perf_counter() + idle
    mq = queue(url, stream, start=StartFrom.EARLIEST, claim_idle=idle, claim_interval=interval)
    handled: list[float] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        handled.append(time.perf_counter())
        if len(handled) == n:
            await mq.stop()

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(mq.run, handle_signals=False))
        with anyio.fail_after(30 + 10 * interval):
            await mq.done.wait()
        await client.delete(stream)
    await client.aclose()
    return (handled[0] - claimable) * 1000, (handled[-1] - claimable) * 1000
