"""The soak's exactly-once mode (``--mode exactly-once``): the ledger of ``make
demo-exactly-once`` under the soak's faults.

Consumers run the ledger's handler (:mod:`demos.exactly_once_worker`): each transfer moves
the balances in PostgreSQL (``streamq.effects.postgres.once`` in the handler's own
transaction, a row in ``ledger``), in a Redis hash (``msg.transaction()``, counted in the
hash ``applied``) and writes a receipt (``msg.publish`` to the topic's receipts stream).
A transient failure is raised at random before the PostgreSQL transaction, after its
commit, or after the Redis effects and the receipt were staged: the retry must apply none
of them twice.

Producers publish transfers that carry their producer and sequence number, so that a
transfer written twice to the topic shows as two entries of one ``(producer, seq)``.
Even-numbered producers use ``publish_many`` as it is (idempotent retries by default,
:mod:`streamq.publish.resend`); a chunk whose publish raised is sent again, a new publish
(the documented contract), its ``seq`` numbers recorded in ``raised-<i>.txt``. Odd-numbered
producers publish each transfer with ``idempotency_key=`` and send a chunk that raised
again with the same keys: none of theirs may ever be in the topic twice.

The consumers run no cleanup: the end check reads the whole topic (and a resend looks
back over entries that must not have been trimmed away meanwhile).
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any, TextIO

import anyio

from demos.exactly_once import ACCOUNTS
from demos.exactly_once_worker import Transfer, apply, prepare, stage
from streamq import Message, MessageQueue, RetryPolicy, StartFrom, StreamqError

MESSAGE_TYPE = "transfer"
CHUNK = 25
RETRY_PAUSE = 0.2
MAX_CATCH_UP = 1.0  # seconds of backlog published in a burst after an outage
FAIL_POINTS = ("before the transaction", "after the commit", "after staging")

log = logging.getLogger(__name__)


class SoakTransfer(Transfer):
    """A transfer that names its producer and its number there."""

    producer: int
    seq: int


class TransientError(Exception):
    """Raised at random at one of :data:`FAIL_POINTS`: the retry must apply nothing twice."""


def receipts_stream(stream: str) -> str:
    """The stream the consumers' receipts go to (another slot than the topic's)."""
    return f"{stream}-receipts"


def ledger_queue(
    url: str, stream: str, consumer: str, seed: int, fail_rate: float, pool: Any,
    group: str, max_deliveries: int,
) -> MessageQueue:  # fmt: skip
    """A soak consumer (the settings of the plain soak's, without cleanup) running the
    ledger's handler with ``pool``'s PostgreSQL connections."""
    mq = MessageQueue(
        url or None, stream=stream, group=group, consumer=consumer, start=StartFrom.EARLIEST,
        retry=RetryPolicy(attempts=3, backoff=0.05, max_deliveries=max_deliveries),
        claim_idle=1.0, claim_interval=0.2, block=0.2, grace=5.0,
        concurrency=8, max_in_flight=32, read_count=32,
    )  # fmt: skip
    rng, receipts = random.Random(seed), receipts_stream(stream)

    def maybe_fail(point: str, at: str) -> None:
        if point == at:
            raise TransientError(f"injected transient failure {at}")

    @mq.handler(MESSAGE_TYPE)
    async def transfer(msg: Message[Transfer]) -> None:  # (producer, seq) ignored
        point = rng.choice(FAIL_POINTS) if rng.random() < fail_rate else ""
        maybe_fail(point, FAIL_POINTS[0])
        async with pool.acquire() as conn:
            await apply(conn, msg)
        maybe_fail(point, FAIL_POINTS[1])
        await stage(msg, receipts)
        maybe_fail(point, FAIL_POINTS[2])

    return mq


async def prepare_database(database: str) -> None:
    """streamq's tables, the ledger's, and every account at 0."""
    import asyncpg

    conn = await asyncpg.connect(database)
    try:
        await prepare(conn, ACCOUNTS)
    finally:
        await conn.close()


def record(out: TextIO, ids: list[str]) -> None:
    """The IDs a publish acknowledged, in the plain soak's format (no poison)."""
    out.write("".join(f"{i} 0\n" for i in ids))
    out.flush()


async def publish_keyed(mq: MessageQueue, stream: str, chunk: list[SoakTransfer]) -> list[str]:
    """Each transfer of ``chunk`` with its own ``idempotency_key``, concurrently."""
    ids = [""] * len(chunk)

    async def one(i: int, t: SoakTransfer) -> None:
        key = f"{stream}:p{t.producer}:{t.seq}"
        ids[i] = await mq.publish(MESSAGE_TYPE, t, idempotency_key=key)

    async with anyio.create_task_group() as tg:
        for i, t in enumerate(chunk):
            tg.start_soon(one, i, t)
    return ids


async def produce_transfers(args: list[str], out: TextIO) -> None:
    """The producer of the exactly-once mode (arguments as :mod:`tests.soak.soak_producer`'s);
    prints ``done <published> <failed attempts>``."""
    url, stream, index, count, rate, seed, _, out_path, seconds, _, _ = args
    producer, total, per_second = int(index), int(count), float(rate)
    keyed = producer % 2 == 1
    rng, deadline = random.Random(int(seed)), time.monotonic() + float(seconds)
    raised = Path(out_path).with_name(f"raised-{producer}.txt")
    mq = MessageQueue(url or None, stream=stream, group="unused")  # publishing only
    sent = failures = 0
    next_at = time.monotonic()
    chunk: list[SoakTransfer] = []
    while sent < total and time.monotonic() < deadline:
        if not chunk:
            chunk = [transfer(rng, producer, sent + i) for i in range(min(CHUNK, total - sent))]
        ids = await attempt(mq, stream, chunk, keyed)
        if ids is None:
            note_raised(raised, chunk)
            failures += 1
            await anyio.sleep(RETRY_PAUSE)
            continue
        record(out, ids)
        sent += len(chunk)
        next_at = max(next_at + len(chunk) / per_second, time.monotonic() - MAX_CATCH_UP)
        chunk = []
        await anyio.sleep(max(0.0, next_at - time.monotonic()))
    await mq.aclose()
    print(f"done {sent} {failures}", flush=True)


async def attempt(
    mq: MessageQueue, stream: str, chunk: list[SoakTransfer], keyed: bool
) -> list[str] | None:
    """The chunk's IDs, or None when its publish raised (its outcome unknown)."""
    try:
        if keyed:
            return await publish_keyed(mq, stream, chunk)
        return await mq.publish_many(MESSAGE_TYPE, chunk)
    except* StreamqError as group:
        log.warning("publish failed, sending the chunk again: %r", group.exceptions[0])
    return None


def note_raised(path: Path, chunk: list[SoakTransfer]) -> None:
    with path.open("a", encoding="ascii") as out:
        out.write(f"{chunk[0].seq} {chunk[-1].seq}\n")


def transfer(rng: random.Random, producer: int, seq: int) -> SoakTransfer:
    payer, payee = rng.sample(ACCOUNTS, 2)
    return SoakTransfer(payer=payer, payee=payee, cents=rng.randint(1, 50_000),
                        producer=producer, seq=seq)  # fmt: skip


def read_raised(run_dir: Path) -> set[tuple[int, int]]:
    """``(producer, seq)`` of every transfer in a publish that raised (and was sent again)."""
    found = set()
    for path in run_dir.glob("raised-*.txt"):
        producer = int(path.stem.removeprefix("raised-"))
        for line in path.read_text(encoding="ascii").splitlines():
            first, _, last = line.partition(" ")
            if last:
                found |= {(producer, seq) for seq in range(int(first), int(last) + 1)}
    return found
