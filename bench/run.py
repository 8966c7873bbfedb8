"""``make bench``: one JSON line per figure (DESIGN.md, "Benchmarks").

The yardstick ``raw_redispy`` is a plain redis-py XREADGROUP COUNT 100 + XACK loop run in
the same process against the same server; every figure is also given as a ratio to it.
Throughput figures are run ``--rounds`` times, interleaved with the yardstick's own runs;
``msgs_per_s`` is the best run (every run is listed in ``runs``) and ``ratio_to_raw`` the
median over rounds of the figure divided by the yardstick of the same round: on a shared
2-core machine single runs swing ±30%, and drift between rounds cancels out in a pair.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from typing import Any

import anyio
import redis.asyncio as aioredis

from streamq import Message, StartFrom

from . import (
    cleanup,
    consuming,
    flow,
    outputs,
    payloads,
    priorities,
    publishing,
    requests,
    scheduling,
)
from .workload import (
    Email,
    discard,
    discard_queue,
    drain_rate,
    entries,
    fresh_stream,
    payload,
    prefill,
    queue,
    single_server,
    xadd_pipeline,
)


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def raw_redispy(url: str, n: int) -> float:
    stream = fresh_stream("raw")
    await prefill(url, stream, n)
    client = aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, "raw", id="0")
    done = 0
    t0 = time.perf_counter()
    while done < n:
        reply = await client.xreadgroup("raw", "c", {stream: ">"}, count=100, block=1000)
        ids = [entry_id for entry_id, _ in reply[0][1]]
        await client.xack(stream, "raw", *ids)
        done += len(ids)
    elapsed = time.perf_counter() - t0
    await discard(client, stream)
    return n / elapsed


async def raw_xadd_pipelined(url: str, n: int) -> float:
    stream = fresh_stream("rawpub")
    client = aioredis.Redis.from_url(url)
    rows = entries(n)
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        await xadd_pipeline(client, stream, rows[start : start + 1000]).execute()
    elapsed = time.perf_counter() - t0
    await discard(client, stream)
    return n / elapsed


async def publish_many(url: str, n: int) -> float:
    mq = queue(url, fresh_stream("pubmany"))
    items = [payload(i) for i in range(n)]
    t0 = time.perf_counter()
    await mq.publish_many("email", items)
    elapsed = time.perf_counter() - t0
    await discard_queue(mq)
    return n / elapsed


async def consume_single(url: str, n: int) -> float:
    return await drain_rate(url, "cons", n)


async def consume_batch(url: str, n: int, size: int = 100) -> float:
    stream = fresh_stream("batch")
    await prefill(url, stream, n)
    mq = queue(url, stream)
    count = 0

    @mq.batch_handler("email", size=size, timeout=0.05)
    async def handle(msgs: list[Message[Email]]) -> None:
        nonlocal count
        count += len(msgs)
        if count >= n:
            await mq.stop()

    async with mq:
        t0 = time.perf_counter()
        await mq.run(handle_signals=False)
        elapsed = time.perf_counter() - t0
        assert (await mq.topic_info()).pending == 0, "bench consumer left entries pending"
        await mq.client.delete(stream)
    return n / elapsed


async def latency(url: str, rate: int, seconds: float) -> tuple[float, float]:
    """A producer process publishes at a steady ``rate``; latency = handler start minus the
    producer's send time (same machine clock)."""
    mq = queue(url, fresh_stream("lat"), start=StartFrom.LATEST, block=0.1)
    total = int(rate * seconds)
    samples: list[float] = []

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        samples.append((time.time() - msg.data.t) * 1000)
        if len(samples) == total:
            await mq.stop()

    command = [sys.executable, "-m", "bench.producer", url, mq.stream, str(rate), str(total)]
    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(mq.run, handle_signals=False))
        await anyio.sleep(0.2)
        await anyio.run_process(command, check=True)
        with anyio.fail_after(30):
            await mq.done.wait()
        await mq.client.delete(mq.stream)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    return p50, p99


async def consumer_rss_mb(url: str, n: int, *raw: str) -> float:
    """Peak RSS of a consumer process (``--raw``: the plain redis-py loop) over ``n``
    entries prefilled here."""
    stream = fresh_stream("rss")
    await prefill(url, stream, n)
    out = await anyio.run_process(
        [sys.executable, "-m", "bench.rss_consumer", *raw, url, stream, str(n)], check=True
    )
    await discard(aioredis.Redis.from_url(url), stream)
    return float(out.stdout.decode().strip().splitlines()[-1])


async def best_of(rounds: int, runs: dict[str, Any]) -> dict[str, list[float]]:
    """Run each throughput figure ``rounds`` times, interleaved so that the machine's
    drift hits all of them alike; return every rate measured."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            rates[name].append(await run())
    return rates


def paired_ratio(rates: list[float], yardstick: list[float]) -> float:
    """Median over rounds of (figure / yardstick in the same round): the machine's drift
    between rounds cancels out, which best-of against best-of does not."""
    if len(yardstick) == 1:  # a figure run once: against the yardstick's nearest run
        yardstick = yardstick * len(rates)
    return round(statistics.median(r / y for r, y in zip(rates, yardstick, strict=True)), 3)


async def main(url: str, n: int, quick: bool, rounds: int) -> None:
    consume = await best_of(rounds, {
        "raw_redispy": lambda: raw_redispy(url, n),
        "consume_single": lambda: consume_single(url, n),
        "consume_batch": lambda: consume_batch(url, n),
    })  # fmt: skip
    raw = consume["raw_redispy"]

    def figure(
        name: str, msgs: int, rates: list[float], vs: list[float] = raw, **extra: Any
    ) -> None:
        emit(
            bench=name, msgs=msgs, msgs_per_s=round(max(rates)),
            ratio_to_raw=paired_ratio(rates, vs), runs=[round(r) for r in rates], **extra,
        )  # fmt: skip

    for name, rates in consume.items():
        figure(name, n, rates)
    await publishing_figures(url, n, quick, rounds, figure)
    pub = await best_of(rounds, {
        "raw_xadd_pipelined": lambda: raw_xadd_pipelined(url, n),
        "publish_many": lambda: publish_many(url, n),
    })  # fmt: skip
    figure("raw_xadd_pipelined", n, pub["raw_xadd_pipelined"], vs=raw)
    figure("publish_many", n, pub["publish_many"], vs=raw, ratio_to_raw_xadd_pipelined=(
        paired_ratio(pub["publish_many"], pub["raw_xadd_pipelined"])))  # fmt: skip
    p50, p99 = await latency(url, 2000, 2.0 if quick else 5.0)
    emit(bench="latency_p50_ms", rate=2000, value=round(p50, 3))
    emit(bench="latency_p99_ms", rate=2000, value=round(p99, 3))
    raw_rss = await consumer_rss_mb(url, n, "--raw")
    emit(bench="raw_redispy_rss_mb", msgs=n, value=round(raw_rss, 1))
    rss = await consumer_rss_mb(url, n)
    emit(bench="consumer_rss_mb", msgs=n, value=round(rss, 1), ratio_to_raw=round(rss / raw_rss, 3))
    await consuming_figures(url, n, quick, rounds, figure)
    await scheduling.figures(url, quick, rounds, emit)
    await cleanup.figures(url, quick, rounds, emit)
    await flow.figures(url, quick, rounds, emit)
    await priorities.figures(url, quick, rounds, emit)
    await payloads.figures(url, quick, rounds, emit)
    await requests.figures(url, quick, rounds, emit)
    await outputs.figures(url, quick, rounds, emit)


Figure = Any  # figure(name, msgs, rates, vs=..., **extra) in main()


async def in_thread(run: Any, url: str, n: int) -> float:
    """A blocking figure, off the event loop (its threads are the point)."""
    rate: float = await anyio.to_thread.run_sync(run, url, n)
    return rate


async def publishing_figures(url: str, n: int, quick: bool, rounds: int, figure: Figure) -> None:
    """One by one, 200 tasks at once, 32 threads, durably: each next to plain redis-py."""
    n_single = 2000 if quick else 5000
    n_many = n // 5 if quick else n
    pub = await best_of(rounds, {
        "raw_xadd_single": lambda: publishing.raw_xadd_single(url, n_single),
        "publish_single": lambda: publishing.publish_single(url, n_single),
        "raw_xadd_concurrent": lambda: publishing.raw_xadd_concurrent(url, n_many),
        "publish_concurrent": lambda: publishing.publish_concurrent(url, n_many),
        "raw_xadd_threads": lambda: in_thread(publishing.raw_xadd_threads, url, n_many),
        "publish_threads": lambda: in_thread(publishing.publish_threads, url, n_many),
    })  # fmt: skip
    for name, plain in (("single", n_single), ("concurrent", n_many), ("threads", n_many)):
        yardstick = pub[f"raw_xadd_{name}"]
        figure(f"raw_xadd_{name}", plain, yardstick, **{"ratio_to_raw_xadd": 1.0})
        figure(f"publish_{name}", plain, pub[f"publish_{name}"],
               ratio_to_raw_xadd=paired_ratio(pub[f"publish_{name}"], yardstick))  # fmt: skip
    durable, single = await publishing.durable_pair(n_single // 5, rounds=max(rounds, 3))
    ratio = statistics.median(d / s for d, s in zip(durable, single, strict=True))
    emit(bench="publish_durable", msgs=n_single // 5, replicas=1,
         msgs_per_s=round(max(durable)), runs=[round(r) for r in durable],
         ratio_to_publish_single_same_cluster=round(ratio, 3))  # fmt: skip


async def consuming_figures(url: str, n: int, quick: bool, rounds: int, figure: Figure) -> None:
    """Two consumer processes against one; a dead consumer's entries picked up."""
    procs = await best_of(rounds, {
        "consume_1proc": lambda: consuming.consume_processes(url, n, 1),
        "consume_2proc": lambda: consuming.consume_processes(url, n, 2),
    })  # fmt: skip
    figure("consume_1proc", n, procs["consume_1proc"])
    figure("consume_2proc", n, procs["consume_2proc"], ratio_to_1proc=paired_ratio(
        procs["consume_2proc"], procs["consume_1proc"]))  # fmt: skip
    first, last = await consuming.claim_latency(url)
    emit(bench="claim_latency_ms", msgs=200, claim_idle=1.0, claim_interval=0.5,
         first=round(first, 1), value=round(last, 1))  # fmt: skip


def spark_figures(url: str, n: int) -> None:
    try:
        from . import spark_bench
    except ImportError as e:  # the [spark] extra is not installed
        emit(bench="spark", skipped=f"pyspark not installed ({e})")
        return
    spark_bench.run(url, n, emit)


def cli() -> None:
    parser = argparse.ArgumentParser(description="streamq benchmarks (JSON lines)")
    parser.add_argument("--msgs", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for smoke tests")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each throughput figure")
    parser.add_argument("--spark-rows", type=int, default=200_000, help="0 skips the Spark figures")
    args = parser.parse_args()
    with single_server() as url:
        anyio.run(main, url, args.msgs, args.quick, args.rounds)
        if args.spark_rows:
            spark_figures(url, args.spark_rows)


if __name__ == "__main__":
    cli()
