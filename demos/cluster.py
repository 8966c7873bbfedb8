"""`make demo-cluster`: a partitioned topic over an embedded Redis Cluster, a master killed.

1. An embedded cluster of 3 masters with one replica each (``EmbeddedCluster``, the same
   valkey binary as the single server), and a topic of 6 partitions: its partitions per
   node are printed from ``topic_info()``.
2. Two consumer processes (``demos.cluster_worker``) share the group ``billing``; one
   producer task per customer publishes that customer's orders by key (``key=customer``),
   numbered 0, 1, 2, ..., durably (``replicas=1``: a ``NotReplicatedError`` means added but
   not confirmed by a replica, and is counted as published-but-unconfirmed).
3. Mid-run the master serving the first customer's partition is SIGKILLed: its replica
   takes over, the producers and consumers ride through, the old master comes back as a
   replica.
4. Checks: every published ID was handled (duplicates only for entries in flight at the
   failover), and each customer's orders are in publish order in their partition and were
   handled in that order by each process. Exit 0 on success, 1 on any loss or disorder.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from demos._common import fresh_stream, setup_logging, spawn
from demos.cluster_worker import GROUP, Order
from streamq import EmbeddedCluster, MessageQueue, NotReplicatedError, StreamId, TopicInfo
from streamq.topic.partitions import PartitionedId, partition_for_key, partition_streams
from streamq.wire.slots import slot_of

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6
CUSTOMERS = ("ada", "zoe", "bob", "ann", "cat", "joe")  # partitions 0..5 by their hash
WORKERS = ("worker-1", "worker-2")
PAUSE = 0.02  # between two orders of one customer: ~50 orders/s each
BEFORE_KILL, AFTER_RESTART = 1.5, 1.0  # seconds of publishing around the failover
DRAIN_TIMEOUT = 30.0


@dataclass
class Producer:
    """One task per customer publishing its orders by key until told to stop."""

    mq: MessageQueue
    published: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    unconfirmed: set[str] = field(default_factory=set)
    stop: anyio.Event = field(default_factory=anyio.Event)

    async def customer(self, name: str) -> None:
        seq = 0
        while not self.stop.is_set():
            order = Order(customer=name, seq=seq)
            try:
                entry_id = await self.mq.publish("order", order, key=name, replicas=1, timeout=0.5)
            except NotReplicatedError as e:  # in the stream, not yet on a replica
                entry_id = e.entry_id
                self.unconfirmed.add(entry_id)
            self.published[name].append(entry_id)
            seq += 1
            await anyio.sleep(PAUSE)

    def all_ids(self) -> set[str]:
        return {i for ids in self.published.values() for i in ids}


@dataclass(frozen=True)
class Handled:
    entry_id: str
    customer: str
    seq: int
    delivery_count: int


def read_log(path: Path) -> list[Handled]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line being written is skipped until it is whole
            rows.append(Handled(parts[0], parts[1], int(parts[2]), int(parts[3])))
    return rows


def start_workers(url: str, topic: str, logs: list[Path]) -> list[subprocess.Popen[bytes]]:
    """The consumer processes; their stderr (the retries they log) goes to ``<log>.err``."""
    workers = []
    for name, log in zip(WORKERS, logs, strict=True):
        with log.with_suffix(".err").open("wb") as err:
            command = [sys.executable, "-m", "demos.cluster_worker", url, topic,
                       str(PARTITIONS), name, str(log)]  # fmt: skip
            workers.append(spawn(command, cwd=ROOT, stderr=err))
    return workers


def worker_stderr(logs: list[Path]) -> list[str]:
    return [line for log in logs for line in log.with_suffix(".err").read_text().splitlines()]


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    for worker in workers:
        if worker.poll() is None:
            worker.terminate()  # SIGTERM: a graceful drain
    codes = []
    for worker in workers:
        try:
            codes.append(worker.wait(timeout=20))
        except subprocess.TimeoutExpired:
            worker.kill()
            codes.append(worker.wait())
    return codes


def print_layout(info: TopicInfo, title: str) -> None:
    print(f"{title}:")
    by_node: dict[str, list[int]] = defaultdict(list)
    for row in info.partitions:
        by_node[row.node].append(row.index)
    for node, indexes in sorted(by_node.items()):
        print(f"  {node}: partitions {', '.join(map(str, sorted(indexes)))}")


def failover(cluster: EmbeddedCluster, stream: str) -> None:
    """Kill the master serving ``stream``, wait for its replica to take over, restart it."""
    victim = cluster.master_of_slot(slot_of(stream))
    began = time.monotonic()
    print(f"killing master :{victim.port} (it serves {stream}) while orders flow")
    cluster.kill_node(victim.port)
    cluster.wait_ready()
    heir = cluster.master_of_slot(slot_of(stream))
    print(f"  replica :{heir.port} took over its slots after {time.monotonic() - began:.1f} s")
    cluster.restart_node(victim.port)
    role = next(n.role for n in cluster.nodes if n.port == victim.port)
    print(f"  :{victim.port} restarted, now a {role}, after {time.monotonic() - began:.1f} s")


async def wait_until_working(logs: list[Path], workers: list[subprocess.Popen[bytes]]) -> None:
    """Wait until every worker handled an order: a process still starting knows only the
    URL it was given, and could not find the cluster if that very node were killed now."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while not all(read_log(log) for log in logs):
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            raise SystemExit("demo failed: the consumer processes did not start handling")
        await anyio.sleep(0.05)


async def wait_until_handled(expected: set[str], logs: list[Path]) -> set[str]:
    """Poll the workers' logs until every expected ID is in them; return what is missing."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while True:
        handled = {h.entry_id for log in logs for h in read_log(log)}
        missing = expected - handled
        if not missing or time.monotonic() > deadline:
            return missing
        await anyio.sleep(0.2)


def stored_order_problems(published: dict[str, list[str]]) -> list[str]:
    """Each customer's IDs: all in its own partition, increasing (publish order kept)."""
    problems = []
    for customer, ids in sorted(published.items()):
        parsed = [PartitionedId.parse(i, PARTITIONS) for i in ids]
        if {p.partition for p in parsed} != {partition_for_key(customer, PARTITIONS)}:
            problems.append(f"{customer}: published to several partitions")
        positions = [StreamId.parse(p.entry_id) for p in parsed]
        if any(b <= a for a, b in itertools.pairwise(positions)):
            problems.append(f"{customer}: IDs not increasing in publish order")
    return problems


def handled_order_problems(per_worker: dict[str, list[Handled]]) -> tuple[list[str], int]:
    """Each worker's handling order per customer: seq increasing, except for orders handled
    more than once (redelivered, or added twice by a publish retried when the connection
    was cut: entries in flight at the failover). Returns (problems, repeats)."""
    times = Counter((h.customer, h.seq) for rows in per_worker.values() for h in rows)
    problems, repeats = [], 0
    for worker, rows in sorted(per_worker.items()):
        highest: dict[str, int] = {}
        for h in rows:
            if h.seq <= highest.get(h.customer, -1):
                if times[h.customer, h.seq] > 1:
                    repeats += 1
                    continue
                problems.append(f"{worker}: {h.customer} #{h.seq} after #{highest[h.customer]}")
            highest[h.customer] = max(h.seq, highest.get(h.customer, -1))
    return problems, repeats


def report(producer: Producer, per_worker: dict[str, list[Handled]], missing: set[str]) -> int:
    problems = stored_order_problems(producer.published)
    disorder, repeats = handled_order_problems(per_worker)
    problems += disorder
    rows = [h for hs in per_worker.values() for h in hs]
    print("per customer (partition: handled in publish order by each worker):")
    for customer in CUSTOMERS:
        ids = producer.published[customer]
        counts = [sum(h.customer == customer for h in per_worker[w]) for w in WORKERS]
        split = ", ".join(f"{w} {c}" for w, c in zip(WORKERS, counts, strict=True))
        print(f"  {customer}: partition {partition_for_key(customer, PARTITIONS)}, "
              f"orders #0..#{len(ids) - 1} ({split})")  # fmt: skip
    for worker in WORKERS:  # per-key order, visible: one customer's orders as handled
        seqs = [f"#{h.seq}" for h in per_worker[worker] if h.customer == CUSTOMERS[0]]
        shown = " ".join(seqs[:12]) + (f" ... {seqs[-1]}" if len(seqs) > 12 else "")
        print(f"  {worker} handled {CUSTOMERS[0]}'s orders {shown}")
    total = len(producer.all_ids())
    print(f"published {total} orders ({len(producer.unconfirmed)} unconfirmed by a replica: "
          f"NotReplicatedError), handled {len({h.entry_id for h in rows})} distinct, "
          f"{repeats} handled again (in flight when the master died)")  # fmt: skip
    if missing:
        problems.append(f"{len(missing)} published orders never handled: {sorted(missing)[:5]}")
    for problem in problems:
        print(f"FAILED: {problem}")
    if problems:
        return 1
    print("nothing lost: every published order handled; per-key order kept")
    return 0


async def run(cluster: EmbeddedCluster, directory: Path) -> int:
    topic = fresh_stream("cluster")
    logs = [directory / f"{name}.log" for name in WORKERS]
    mq = MessageQueue(cluster.url, stream=topic, group=GROUP, partitions=PARTITIONS)
    victim_stream = partition_streams(topic, PARTITIONS)[
        partition_for_key(CUSTOMERS[0], PARTITIONS)
    ]
    async with mq:
        print_layout(await mq.topic_info(), f"topic {topic!r}, {PARTITIONS} partitions per node")
        workers = start_workers(cluster.url, topic, logs)
        producer = Producer(mq)
        try:
            async with anyio.create_task_group() as tg:
                for customer in CUSTOMERS:
                    tg.start_soon(producer.customer, customer)
                await wait_until_working(logs, workers)
                await anyio.sleep(BEFORE_KILL)
                await anyio.to_thread.run_sync(failover, cluster, victim_stream)
                await anyio.sleep(AFTER_RESTART)
                producer.stop.set()
            missing = await wait_until_handled(producer.all_ids(), logs)
        finally:
            codes = await anyio.to_thread.run_sync(stop_workers, workers)
        print_layout(await mq.topic_info(), "after the failover, partitions per node")
        stderr = worker_stderr(logs)
        if any(codes):
            print("\n".join(stderr[-40:]))
            print(f"FAILED: worker exit codes {codes}")
            return 1
        retries = sum("retrying" in line or "reconnecting" in line for line in stderr)
        print(f"the consumers logged {retries} retries while the master was away (WARNING)")
        per_worker = {name: read_log(log) for name, log in zip(WORKERS, logs, strict=True)}
        code = report(producer, per_worker, missing)
        await mq.terminate_topic()
    return code


def main() -> int:
    setup_logging()
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="streamq-demo-") as directory,
        EmbeddedCluster(masters=3, replicas=1) as cluster,
    ):
        ports = ", ".join(str(n.port) for n in cluster.nodes)
        print(
            f"embedded cluster up in {time.monotonic() - began:.1f} s: 3 masters, 3 replicas ({ports})"
        )
        code = anyio.run(run, cluster, Path(directory))
    print(f"demo took {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
