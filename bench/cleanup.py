"""Cleanup figures (MESSAGE_CLEANUP.md); ``python -m bench.cleanup`` runs them alone,
``make bench`` with the others.

* ``cleanup_100k``: one ``mq.cleanup()`` pass over 100,000 entries the group has read and
  acknowledged, every batch re-checked on the server; next to the plain floor of the same
  removal in the same round, one ``XTRIM MINID`` that checks nothing
  (``ratio_to_raw_xtrim``).
* ``cleanup_100k_stopped``: the same with the oldest entry stopped, so that no batch is
  the stream's head and each is deleted ID by ID.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import redis.asyncio as aioredis

from streamq import CleanupPolicy

from .workload import figures_cli, fresh_stream, prefill, queue

Emit = Any
EVERYTHING = CleanupPolicy(max_stream_length=0, min_retention=0)


async def acked_stream(url: str, n: int, name: str) -> str:
    """A stream of ``n`` entries that its one group ``bench`` read and acknowledged."""
    stream = fresh_stream(name)
    client = aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, "bench", id="0", mkstream=True)
    await prefill(url, stream, n)
    while reply := await client.xreadgroup("bench", "r", {stream: ">"}, count=10_000):
        await client.xack(stream, "bench", *[entry_id for entry_id, _ in reply[0][1]])
    await client.aclose()
    return stream


async def raw_xtrim(url: str, n: int) -> float:
    stream = await acked_stream(url, n, "xtrim")
    client = aioredis.Redis.from_url(url)
    last = (await client.xrevrange(stream, count=1))[0][0].decode()
    t0 = time.perf_counter()
    removed = await client.xtrim(stream, minid=last, approximate=False)
    removed += await client.xdel(stream, last)
    elapsed = time.perf_counter() - t0
    await client.delete(stream)
    await client.aclose()
    if removed != n:
        raise RuntimeError(f"XTRIM removed {removed} of {n}: not measured")
    return n / elapsed


async def cleanup_pass(url: str, n: int, stopped: bool = False) -> float:
    stream = await acked_stream(url, n, "cleanup")
    mq = queue(url, stream, cleanup=EVERYTHING)
    async with mq:
        if stopped:
            oldest = (await mq.client.xrange(stream, count=1))[0][0].decode()
            await mq.stop_message(oldest)
        t0 = time.perf_counter()
        removed = await mq.cleanup()
        elapsed = time.perf_counter() - t0
        await mq.terminate_topic()
    if removed != n - stopped:
        raise RuntimeError(f"cleanup removed {removed} of {n - stopped}: not measured")
    return (n - stopped) / elapsed


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    n = 20_000 if quick else 100_000
    rates: dict[str, list[float]] = {"raw_xtrim": [], "head": [], "stopped": []}
    for _ in range(rounds):  # interleaved: the machine's drift hits all of them alike
        rates["raw_xtrim"].append(await raw_xtrim(url, n))
        rates["head"].append(await cleanup_pass(url, n))
        rates["stopped"].append(await cleanup_pass(url, n, stopped=True))
    floor = rates["raw_xtrim"]
    emit(bench=f"raw_xtrim_{n // 1000}k", msgs=n, msgs_per_s=round(max(floor)),
         runs=[round(r) for r in floor])  # fmt: skip
    for name, suffix in (("head", ""), ("stopped", "_stopped")):
        ratio = statistics.median(r / f for r, f in zip(rates[name], floor, strict=True))
        emit(bench=f"cleanup_{n // 1000}k{suffix}", msgs=n, msgs_per_s=round(max(rates[name])),
             ratio_to_raw_xtrim=round(ratio, 3), runs=[round(r) for r in rates[name]])  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq cleanup benchmarks (JSON lines)", figures)
