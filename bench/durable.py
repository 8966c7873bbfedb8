"""``publish_durable`` alone, with what each durable publish costs: ``python -m bench.durable``.

``publish(..., replicas=1)`` on an embedded cluster of one master and one replica, next to
plain publishing on the same cluster, as ``make bench`` measures it (there: 400 messages,
once). A durable publish is a round trip through three processes (the producer sends its
XADD and WAIT together, the master passes the entry on, the replica acknowledges it), so on
a shared 2-core machine its rate follows whatever else runs: two-fold between runs a minute
apart. What one publish costs does not: the commands its master runs, and the CPU time of
the producer, the master and the replica. Compare two versions by those, and by their
rates only over many runs taken in turn.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import anyio
import redis

from streamq import EmbeddedCluster

from .workload import discard_queue, fresh_stream, payload, queue

REPLICA_LINK = {"replconf", "ping", "info"}  # what a master runs besides its clients' commands


def server_costs(url: str) -> tuple[float, dict[str, int]]:
    """A node's CPU seconds so far, and how often it ran each command."""
    with redis.Redis.from_url(url) as node:
        cpu, stats = node.info("cpu"), node.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    return float(cpu["used_cpu_user"] + cpu["used_cpu_sys"]), calls


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def publish_rate(cluster: EmbeddedCluster, n: int, replicas: int) -> dict[str, Any]:
    """Publish ``n`` messages with ``replicas``; the rate and the costs of one publish."""
    mq = queue(cluster.url, fresh_stream("durable"))
    await mq.publish("email", payload(0), replicas=replicas, timeout=1.0)  # stream, topic
    nodes = {node.role: node.url for node in cluster.nodes}
    before = {role: server_costs(url) for role, url in nodes.items()}
    cpu, t0 = own_cpu(), time.perf_counter()
    for i in range(n):
        await mq.publish("email", payload(i), replicas=replicas, timeout=1.0)
    elapsed, cpu = time.perf_counter() - t0, own_cpu() - cpu
    after = {role: server_costs(url) for role, url in nodes.items()}
    await discard_queue(mq)
    (_, calls_before), (_, calls_after) = before["master"], after["master"]
    per_publish = {
        name: round((count - calls_before.get(name, 0)) / n, 2)
        for name, count in calls_after.items()
        if name not in REPLICA_LINK
    }  # connecting (HELLO, CLIENT SETINFO) rounds to 0
    commands = {name: count for name, count in per_publish.items() if count}
    cpu_us = {"producer": round(cpu / n * 1e6)} | {
        role: round((after[role][0] - before[role][0]) / n * 1e6) for role in ("master", "replica")
    }
    return {"rate": n / elapsed, "master_commands": commands, "cpu_us": cpu_us}


async def durable_figures(n: int, rounds: int) -> None:
    with EmbeddedCluster(masters=1, replicas=1) as cluster:
        for _ in range(rounds):
            durable = await publish_rate(cluster, n, 1)
            plain = await publish_rate(cluster, n, 0)
            print(json.dumps({
                "bench": "publish_durable", "msgs": n, "replicas": 1,
                "msgs_per_s": round(durable["rate"]),
                "ratio_to_publish_single_same_cluster": round(durable["rate"] / plain["rate"], 3),
                "master_commands_per_publish": durable["master_commands"],
                "cpu_us_per_publish": durable["cpu_us"],
                "cpu_us_per_plain_publish": plain["cpu_us"],
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="publish_durable alone (JSON lines)")
    parser.add_argument("--msgs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    anyio.run(durable_figures, args.msgs, args.rounds)
