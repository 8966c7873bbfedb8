"""`make demo-exactly-once`: a ledger whose consumers are SIGKILLed at random, every transfer
applied exactly once.

1. A PostgreSQL server of its own (Debian's ``initdb`` and ``pg_ctl`` in a temporary folder,
   ``make`` installs them) and a topic of transfers (payer, payee, cents) on the embedded
   server (or ``$STREAMQ_REDIS_URL``).
2. Three consumer processes (``demos.exactly_once_worker``) apply each transfer three ways:
   the balances in PostgreSQL (``streamq.effects.postgres.once`` in the handler's own
   transaction), the balances in a Redis hash (``msg.transaction()``, run with the ack),
   and a receipt in a stream of receipts (``msg.publish``, written with the ack).
3. While transfers are published (idempotent publish retries, the default), a random
   running worker is SIGKILLed every fraction of a second, wherever it is (inside a PostgreSQL
   transaction, between its commit and the ack, in the ack itself), and replaced by a new
   process under a new name, which claims the dead one's entries.
4. Checks, against the transfers published: each has one row in PostgreSQL's ``ledger``,
   one count in the Redis hash ``applied`` and one receipt; both sets of balances equal
   the totals of the published transfers; the topic holds each transfer once. Prints the
   totals; exit 0 on success, 1 on anything missing or doubled.

``--seconds`` (publishing time, 6 by default), ``--rate``, ``--workers`` and ``--seed``
change the run.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from demos._common import created, end_children, fresh_stream, run, setup_logging, spawn, where
from demos.exactly_once_worker import GROUP, READY, Transfer, prepare
from demos.postgres import postgres_bin, postgres_server
from streamq import MessageQueue
from streamq.server import default_url

ROOT = Path(__file__).resolve().parent.parent
ACCOUNTS = ["ada", "bob", "cat", "dan", "eve", "fay"]
KILL_EVERY = (0.3, 0.9)  # seconds between two SIGKILLs, at random
MIN_KILLS = 3  # transfers are published until there were that many
SETTLE_TIMEOUT = 60.0  # seconds for the last transfers to be applied once killing stops


@dataclass
class Workers:
    """The consumer processes: each slot's current process, replaced after a SIGKILL."""

    command: list[str]  # the worker's arguments before its name and log
    directory: Path
    slots: int
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # each slot's current process's
    started: int = 0
    kills: int = 0

    def start(self, slot: int) -> None:
        self.started += 1
        name = f"worker-{slot}.{self.started}"
        log = self.directory / f"{name}.log"
        with (self.directory / f"{name}.err").open("wb") as err:
            command = [*self.command, name, str(log)]
            self.processes[slot] = spawn(command, cwd=ROOT, stdout=err, stderr=err)
        self.names[slot] = name

    def kill_one(self, rng: random.Random) -> str | None:
        """SIGKILL one running worker at random and start its replacement (None: every
        worker is still starting)."""
        running = [slot for slot in self.processes if self.running(slot)]
        if not running:
            return None
        slot = rng.choice(running)
        victim = self.processes[slot]
        victim.kill()
        victim.wait()
        self.kills += 1
        self.start(slot)
        return f"worker-{slot} (pid {victim.pid})"

    def crashed(self) -> list[str]:
        """The workers that ended by themselves (not killed by the demo)."""
        return [
            f"worker-{slot} exited with {p.returncode}"
            for slot, p in self.processes.items()
            if p.poll() is not None
        ]

    def running(self, slot: int) -> bool:
        """The slot's current worker consumes (a SIGTERM drains it; one still starting
        would die of it, and a SIGKILL would find nothing in its hands)."""
        log = self.directory / f"{self.names[slot]}.log"
        return log.exists() and READY in log.read_text(encoding="utf-8").splitlines()

    def ready(self) -> bool:
        return all(self.running(slot) for slot in self.processes)

    def stop(self) -> list[int]:
        """SIGTERM every worker (a graceful drain); their exit codes."""
        for p in self.processes.values():
            if p.poll() is None:
                p.terminate()
        codes = []
        for p in self.processes.values():
            try:
                codes.append(p.wait(timeout=30))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        return codes

    def runs(self) -> Counter[str]:
        """What the runs of the handler found, from every worker's log: ``applied``
        (first commit) or ``skipped`` (committed before), and ``again`` (delivered again)."""
        seen: Counter[str] = Counter()
        for log in self.directory.glob("*.log"):
            for line in log.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) == 3:  # a line cut by a SIGKILL is left out
                    seen[parts[1]] += 1
                    seen["again"] += int(parts[2]) > 1
        return seen

    def stderr_tail(self) -> str:
        lines = [ln for err in self.directory.glob("*.err") for ln in err.read_text().splitlines()]
        return "\n".join(lines[-40:])


@dataclass
class Observed:
    """What the three sinks hold at the end."""

    ledger: Counter[str]  # PostgreSQL: rows per transfer ID
    applied: Counter[str]  # Redis: the count per transfer ID in the hash ``applied``
    receipts: Counter[str]  # receipts per transfer ID
    pg_balances: dict[str, int]
    redis_balances: dict[str, int]
    stream_length: int  # entries in the topic of transfers


def expected_balances(published: Mapping[str, Transfer]) -> dict[str, int]:
    balances = dict.fromkeys(ACCOUNTS, 0)
    for t in published.values():
        balances[t.payer] -= t.cents
        balances[t.payee] += t.cents
    return balances


def off_by(counts: Counter[str], published: Mapping[str, Any]) -> tuple[list[str], ...]:
    """The published transfers missing from ``counts``, those counted more than once, and
    the IDs counted that were never published."""
    missing = [i for i in published if counts[i] == 0]
    doubled = [i for i, n in counts.items() if n > 1]
    unknown = [i for i in counts if i not in published]
    return missing, doubled, unknown


def once_problems(sink: str, counts: Counter[str], published: Mapping[str, Transfer]) -> list[str]:
    """Each published transfer exactly once in ``counts``, and nothing else."""
    problems = []
    missing, doubled, unknown = off_by(counts, published)
    for what, ids in (("missing", missing), ("applied more than once", doubled),
                      ("never published", unknown)):  # fmt: skip
        if ids:
            problems.append(f"{sink}: {len(ids)} transfers {what}: {sorted(ids)[:5]}")
    return problems


def problems(published: Mapping[str, Transfer], seen: Observed) -> list[str]:
    found = once_problems("PostgreSQL ledger", seen.ledger, published)
    found += once_problems("Redis hash applied", seen.applied, published)
    found += once_problems("receipts", seen.receipts, published)
    expected = expected_balances(published)
    for sink, balances in (("PostgreSQL", seen.pg_balances), ("Redis", seen.redis_balances)):
        wrong = {a: b for a, b in balances.items() if b != expected.get(a, 0)}
        wrong |= {a: 0 for a in expected if a not in balances and expected[a] != 0}
        if wrong:
            problems_ = ", ".join(f"{a} {cents(b)} (expected {cents(expected.get(a, 0))})"
                                  for a, b in sorted(wrong.items()))  # fmt: skip
            found.append(f"{sink} balances differ: {problems_}")
    if seen.stream_length != len(published):
        found.append(f"the topic holds {seen.stream_length} transfers, {len(published)} published")
    return found


def cents(amount: int) -> str:
    return f"{amount / 100:+,.2f}"


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def balances_key(topic: str) -> str:
    """The workers' Redis hash of balances (``tx.key("balances")``: the topic's slot)."""
    return f"{{{topic}}}:balances"


def applied_key(topic: str) -> str:
    """The workers' Redis hash: transfer ID -> times applied."""
    return f"{{{topic}}}:applied"


async def observe(database: str, mq: MessageQueue, topic: str, receipts: str) -> Observed:
    """What the three sinks of the ledger consuming ``topic`` hold (``mq`` serves the topic
    and reaches the receipts; ``database``: PostgreSQL's URL)."""
    import asyncpg

    conn = await asyncpg.connect(database)
    try:
        rows = await conn.fetch("SELECT transfer, count(*) AS n FROM ledger GROUP BY transfer")
        ledger = Counter({r["transfer"]: int(r["n"]) for r in rows})
        pg = {r["account"]: int(r["cents"]) for r in await conn.fetch("SELECT * FROM balances")}
    finally:
        await conn.close()
    client = mq.client_for(topic)
    applied = Counter(
        {text(k): int(v) for k, v in (await client.hgetall(applied_key(topic))).items()}
    )
    redis_balances = {
        text(k): int(v) for k, v in (await client.hgetall(balances_key(topic))).items()
    }
    found: Counter[str] = Counter()
    for _, fields in await mq.client_for(receipts).xrange(receipts):
        data = {text(k): v for k, v in fields.items()}["data"]
        found[json.loads(data)["transfer"]] += 1
    length = int(await client.xlen(topic))
    return Observed(ledger, applied, found, pg, redis_balances, length)


class Ledger:
    """The demo's run: its topic, receipts, database and workers."""

    def __init__(self, options: argparse.Namespace, url: str, database: str, logs: Path) -> None:
        self.options, self.database = options, database
        self.rng = random.Random(options.seed)
        self.topic, self.receipts = fresh_stream("ledger"), fresh_stream("receipts")
        self.balances_key, self.applied_key = balances_key(self.topic), applied_key(self.topic)
        created(self.balances_key, self.applied_key)  # the workers' Redis effects
        self.mq = MessageQueue(url, stream=self.topic, group=GROUP)
        command = [sys.executable, "-m", "demos.exactly_once_worker", url, self.topic,
                   self.receipts, database]  # fmt: skip
        self.workers = Workers(command, logs, options.workers)
        self.published: dict[str, Transfer] = {}

    async def publish(self) -> None:
        """Transfers at the chosen rate for the chosen time, and on until the workers were
        SIGKILLed ``MIN_KILLS`` times (a loaded machine starts them slowly), at most 4 times
        as long (publish retries are idempotent: a lost reply adds no transfer twice)."""
        began, n = time.monotonic(), 0
        planned = int(self.options.seconds * self.options.rate)
        while n < planned or (self.workers.kills < MIN_KILLS and n < 4 * planned):
            n += 1
            payer, payee = self.rng.sample(ACCOUNTS, 2)
            transfer = Transfer(payer=payer, payee=payee, cents=self.rng.randint(1, 50_000))
            self.published[await self.mq.publish("transfer", transfer)] = transfer
            await anyio.sleep(max(0.0, began + n / self.options.rate - time.monotonic()))

    async def kill(self, publishing: anyio.Event, scope: anyio.CancelScope) -> None:
        """SIGKILL a random running worker every fraction of a second while transfers come;
        cancel ``scope`` if a worker ended by itself."""
        while not publishing.is_set():
            await anyio.sleep(self.rng.uniform(*KILL_EVERY))
            if self.workers.crashed():
                scope.cancel()
                return
            if (victim := self.workers.kill_one(self.rng)) is None:
                continue
            print(f"  SIGKILL {victim} after {len(self.published)} transfers published; "
                  f"restarted under a new name ({self.workers.started} processes so far)")  # fmt: skip

    async def settled(self) -> bool:
        """Every published transfer in each sink, nothing pending, the outbox forwarded."""
        seen = await self.observe()
        info = await self.mq.topic_info()
        return (
            all(len(c) >= len(self.published) for c in (seen.ledger, seen.applied, seen.receipts))
            and info.pending == 0
            and info.outbox == 0
        )

    async def observe(self) -> Observed:
        return await observe(self.database, self.mq, self.topic, self.receipts)

    async def run(self) -> int:
        import asyncpg

        conn = await asyncpg.connect(self.database)
        await prepare(conn, ACCOUNTS)
        await conn.close()
        async with self.mq:
            began = time.monotonic()
            for slot in range(self.options.workers):
                self.workers.start(slot)
            while not self.workers.ready():  # killed while starting, they would hold nothing
                if self.workers.crashed() or time.monotonic() > began + SETTLE_TIMEOUT:
                    print(self.workers.stderr_tail())
                    print(f"FAILED: the workers did not start: {self.workers.crashed()}")
                    return 1
                await anyio.sleep(0.1)
            print(f"{self.options.workers} worker processes consume {self.topic!r} "
                  f"(group {GROUP!r}, up after {time.monotonic() - began:.1f} s); transfers "
                  f"for {self.options.seconds} s, ~{self.options.rate}/s:")  # fmt: skip
            published = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.kill, published, tg.cancel_scope)
                await self.publish()
                published.set()
            print(f"published {len(self.published)} transfers; {self.workers.kills} SIGKILLs; "
                  "waiting for the last ones")  # fmt: skip
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while not self.workers.crashed() and (
                not await self.settled() or not self.workers.ready()
            ):
                if time.monotonic() > deadline:
                    print("the last transfers were not all applied in time")
                    break
                await anyio.sleep(0.2)
            if crashed := self.workers.crashed():
                print(self.workers.stderr_tail())
                print(f"FAILED: a worker ended by itself: {crashed}")
                return 1
            codes = await anyio.to_thread.run_sync(self.workers.stop)
            seen = await self.observe()
        if any(codes):
            print(self.workers.stderr_tail())
            print(f"FAILED: worker exit codes after SIGTERM {codes}")
            return 1
        return self.report(seen)

    def report(self, seen: Observed) -> int:
        expected = expected_balances(self.published)
        print(f"{'account':<8} {'published':>12} {'PostgreSQL':>12} {'Redis hash':>12}")
        for a in ACCOUNTS:
            print(f"{a:<8} {cents(expected[a]):>12} {cents(seen.pg_balances.get(a, 0)):>12} "
                  f"{cents(seen.redis_balances.get(a, 0)):>12}")  # fmt: skip
        runs = self.workers.runs()
        print(f"{runs['applied'] + runs['skipped']} handler runs committed for "
              f"{len(self.published)} transfers; {runs['again']} of them of a transfer delivered "
              f"again (its worker SIGKILLed holding it), {runs['skipped']} found its PostgreSQL "
              "effects committed by an earlier run whose ack never came, and skipped them")  # fmt: skip
        n = len(self.published)
        print(f"transfers: {n} published, {seen.stream_length} in the topic; "
              f"PostgreSQL ledger rows {sum(seen.ledger.values())}, Redis applied "
              f"{sum(seen.applied.values())}, receipts {sum(seen.receipts.values())}")  # fmt: skip
        found = problems(self.published, seen)
        for problem in found:
            print(f"FAILED: {problem}")
        if found:
            return 1
        print(f"exactly once: each of the {n} transfers applied once to the PostgreSQL "
              "balances, once to the Redis hash, one receipt each")  # fmt: skip
        return 0


async def main(options: argparse.Namespace) -> int:
    setup_logging()
    bin_dir = postgres_bin()
    if bin_dir is None:
        print("demo failed: Debian's postgresql is not installed "
              "(`make demo-exactly-once` installs it: apt-get install postgresql)")  # fmt: skip
        return 1
    began = time.monotonic()
    url = default_url()  # the worker processes are given the same server
    print(f"ledger demo on {where()} ({url})")
    with tempfile.TemporaryDirectory(prefix="demo-ledger-") as logs, postgres_server(bin_dir) as db:
        port = db.rsplit(":", 1)[1].split("/")[0]
        print(f"PostgreSQL {bin_dir.parent.name} on port {port}, a temporary folder of its own "
              f"(up after {time.monotonic() - began:.1f} s)")  # fmt: skip
        try:
            code = await Ledger(options, url, db, Path(logs)).run()
        finally:  # the workers end before their database does
            end_children()
    print(f"demo took {time.monotonic() - began:.1f} s; PostgreSQL stopped and removed")
    return code


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demos.exactly_once", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--seconds", type=float, default=6.0, help="publishing time (6)")
    parser.add_argument("--rate", type=float, default=150.0, help="transfers a second (150)")
    parser.add_argument("--workers", type=int, default=3, help="consumer processes (3)")
    parser.add_argument("--seed", type=int, default=None, help="the random kills and transfers")
    return parser.parse_args(argv)


if __name__ == "__main__":
    run(main, parse(sys.argv[1:]))
