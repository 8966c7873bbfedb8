"""``make bench``, scale-out figures: ``cluster_consume`` (DESIGN.md, "Benchmarks").

A topic of 6 partitions on an embedded cluster of 3 masters (no replicas), prefilled with
the workload (not timed), consumed by 1 and by 2 consumer processes (bench/cluster_consumer.py,
a no-op handler, the default settings as ``consume_single``). The clock starts when the
processes, connected and ready, are told to go, and stops when every partition's group
has no lag and nothing pending (all acked), polled every 10 ms.

The yardsticks run in the same process, interleaved round by round (5 rounds) with the
cluster runs: ``consume_single`` and ``raw_redispy`` of bench/run.py on one embedded
server. Each figure carries ``ratio_to_consume_single`` (and ``ratio_to_raw``): the median
over rounds of the figure divided by the yardstick of the same round; the 2-process figure
also ``ratio_to_one_process``; and ``cpu_us_per_msg``, the CPU time the consumer processes
and the cluster's servers spent per message (what bounds 2 processes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import anyio
import redis.asyncio as aioredis
from anyio.abc import Process

try:
    import psutil
except ImportError:  # a dev dependency: without it the CPU figures are left out
    psutil = None  # type: ignore[assignment]  # the module, or None without it

from streamq import MessageQueue
from streamq.server import EmbeddedCluster

from .run import best_of, consume_single, emit, paired_ratio, raw_redispy
from .workload import fresh_stream, payload, queue, single_server

PARTITIONS, MASTERS = 6, 3
POLL = 0.01  # seconds between two checks of "all acked"
RUN_TIMEOUT = 120.0  # a stalled consumer fails the figure instead of hanging make bench


async def all_acked(mq: MessageQueue, done: set[str]) -> bool:
    """Every partition's group read to the end (lag 0) and nothing pending. A partition
    found so is added to ``done`` and not asked again (nothing is added while it runs)."""
    for stream in mq.streams:
        if stream in done:
            continue
        client: aioredis.Redis = mq.client_for(stream)
        (group,) = [g for g in await client.xinfo_groups(stream) if g["name"] == b"bench"]
        if group["lag"] != 0 or group["pending"] != 0:
            return False
        done.add(stream)
    return True


async def start_consumers(url: str, topic: str, processes: int) -> list[Process]:
    """Consumer processes, each connected and waiting for the word to go."""
    started = []
    for i in range(processes):
        command = [sys.executable, "-m", "bench.cluster_consumer", url, topic,
                   str(PARTITIONS), f"bench-{i + 1}"]  # fmt: skip
        started.append(
            await anyio.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
            )
        )
    try:
        for process in started:
            assert process.stdout is not None
            with anyio.fail_after(60):
                line = await process.stdout.receive()
            assert line.startswith(b"ready"), f"bench consumer not ready: {line!r}"
    except BaseException:
        for process in started:
            process.kill()
        raise
    return started


async def stop_consumers(started: list[Process]) -> int:
    """SIGTERM (a graceful drain); the total the processes say they handled."""
    total = 0
    for process in started:
        process.terminate()
        assert process.stdout is not None
        with anyio.fail_after(30):
            out = b"".join([chunk async for chunk in process.stdout])
            code = await process.wait()
        assert code == 0, f"bench consumer exited {code}"
        total += int(out.split()[-1])
    return total


class CpuMeter:
    """CPU seconds (user + system) the given processes use from now on: where a run's time
    went, consumers or servers (psutil, a dev dependency; nothing without it)."""

    def __init__(self, pids: list[int]) -> None:
        self._processes = [psutil.Process(pid) for pid in pids] if psutil else []
        self._start = self._total()

    def _total(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self._processes)

    def used(self) -> float | None:
        return self._total() - self._start if self._processes else None


def node_pids(urls: list[str]) -> list[int]:
    """The valkey-server processes of the embedded cluster (children of this process)."""
    if psutil is None:
        return []
    ports = {url.rsplit(":", 1)[1].split("/")[0] for url in urls}
    return [
        child.pid
        for child in psutil.Process().children()
        if any(f"127.0.0.1:{port}" in " ".join(child.cmdline()) for port in ports)
    ]


# CPU microseconds per message of the consumers and of the servers, per process count
cpu_per_msg: dict[int, list[tuple[float, float]]] = {1: [], 2: []}


async def cluster_consume(url: str, n: int, processes: int, servers: list[int]) -> float:
    mq = queue(url, fresh_stream("cluster"), partitions=PARTITIONS)
    async with mq:
        await mq.publish_many("email", [payload(i) for i in range(n)])  # keyless: in turn
        consumers = await start_consumers(url, mq.stream, processes)
        try:
            consumer_cpu, server_cpu = CpuMeter([p.pid for p in consumers]), CpuMeter(servers)
            t0 = time.perf_counter()
            for process in consumers:
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
            with anyio.fail_after(RUN_TIMEOUT):
                done: set[str] = set()
                while not await all_acked(mq, done):  # noqa: ASYNC110  # the state is in Redis
                    await anyio.sleep(POLL)
            elapsed = time.perf_counter() - t0
            used = consumer_cpu.used(), server_cpu.used()
            if used[0] is not None and used[1] is not None:
                cpu_per_msg[processes].append((used[0] * 1e6 / n, used[1] * 1e6 / n))
        finally:
            handled = await stop_consumers(consumers)
        assert handled >= n, f"bench consumers handled {handled} of {n}"
        await mq.terminate_topic()
    return n / elapsed


async def main(single_url: str, cluster_urls: list[str], n: int, rounds: int) -> None:
    url, servers = cluster_urls[0], node_pids(cluster_urls)
    rates = await best_of(rounds, {
        "raw_redispy": lambda: raw_redispy(single_url, n),
        "consume_single": lambda: consume_single(single_url, n),
        "cluster_1": lambda: cluster_consume(url, n, 1, servers),
        "cluster_2": lambda: cluster_consume(url, n, 2, servers),
    })  # fmt: skip
    for processes in (1, 2):
        runs = rates[f"cluster_{processes}"]
        extra: dict[str, Any] = {}
        if processes == 2:
            extra["ratio_to_one_process"] = paired_ratio(runs, rates["cluster_1"])
        if cpu := cpu_per_msg[processes]:  # medians over the rounds
            extra["cpu_us_per_msg"] = {
                "consumers": round(statistics.median(c for c, _ in cpu), 2),
                "servers": round(statistics.median(s for _, s in cpu), 2),
            }
        emit(
            bench="cluster_consume", processes=processes, partitions=PARTITIONS,
            masters=MASTERS, msgs=n, msgs_per_s=round(max(runs)), runs=[round(r) for r in runs],
            ratio_to_consume_single=paired_ratio(runs, rates["consume_single"]),
            ratio_to_raw=paired_ratio(runs, rates["raw_redispy"]), **extra,
            consume_single_runs=[round(r) for r in rates["consume_single"]],
        )  # fmt: skip


def cli() -> None:
    parser = argparse.ArgumentParser(description="streamq cluster benchmarks (JSON lines)")
    parser.add_argument("--msgs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5, help="runs of each figure")
    args = parser.parse_args()
    with single_server() as single_url, EmbeddedCluster(masters=MASTERS) as cluster:
        anyio.run(main, single_url, cluster.urls, args.msgs, args.rounds)


if __name__ == "__main__":
    cli()
