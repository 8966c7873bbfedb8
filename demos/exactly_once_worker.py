"""A consumer process of `make demo-exactly-once` (demos/exactly_once.py starts several and
SIGKILLs them at random moments).

Usage: python -m demos.exactly_once_worker REDIS_URL TOPIC RECEIPTS DATABASE_URL CONSUMER LOG

One run of the handler per delivered transfer, its three effects each applied once:

1. PostgreSQL, in one transaction of the handler's own: ``once(conn, msg)`` records the
   entry; the first time, the two balances move and the transfer gets a row in ``ledger``;
   when an earlier run committed already (killed before its ack), nothing is written again.
2. Redis, through ``msg.transaction()``: the two balances move in the hash
   ``{<topic>}:balances`` and the transfer is counted in ``{<topic>}:applied``; the
   commands run in the script of the entry's ack, so once.
3. A receipt, through ``msg.publish(..., stream=RECEIPTS)``: written with the ack, so once.

A line ``ready`` in its LOG says it runs (a SIGTERM from then on drains it, exit 0);
after each PostgreSQL commit it appends ``<entry id> applied|skipped <delivery count>`` to
LOG (what the demo prints about the runs that found their effects committed already).
"""

from __future__ import annotations

import random
import sys
from typing import Any, TextIO

import anyio
from pydantic import BaseModel

from demos._common import setup_logging
from streamq import Message, MessageQueue, StartFrom
from streamq.effects.postgres import migrate, once

GROUP = "ledger"
READY = "ready"  # a line of the log: the worker runs, a SIGTERM now drains it
CONCURRENCY = 8  # transfers in flight per process, one PostgreSQL connection each
WORK_AFTER_COMMIT = 0.01  # at most, seconds: a kill often lands between commit and ack

SCHEMA = """
CREATE TABLE IF NOT EXISTS balances (account text PRIMARY KEY, cents bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    transfer text NOT NULL,  -- no unique key: a transfer applied twice would show twice
    payer text NOT NULL, payee text NOT NULL, cents bigint NOT NULL
);
"""


class Transfer(BaseModel):
    payer: str
    payee: str
    cents: int


class Receipt(BaseModel):
    transfer: str  # the transfer's entry ID
    payer: str
    payee: str
    cents: int


async def prepare(conn: Any, accounts: list[str]) -> None:
    """streamq's tables, the ledger's, and every account at 0."""
    await migrate(conn)
    await conn.execute(SCHEMA)
    await conn.executemany(
        "INSERT INTO balances VALUES ($1, 0) ON CONFLICT DO NOTHING", [(a,) for a in accounts]
    )


async def apply(conn: Any, msg: Message[Transfer]) -> bool:
    """The transfer's PostgreSQL effects, once: whether this run applied them."""
    t = msg.data
    async with conn.transaction(), once(conn, msg) as first:
        if first:
            # the two rows in one order for every transfer: no deadlock between two
            for account, delta in sorted([(t.payer, -t.cents), (t.payee, t.cents)]):
                await conn.execute(
                    "UPDATE balances SET cents = cents + $2 WHERE account = $1", account, delta
                )
            await conn.execute(
                "INSERT INTO ledger VALUES ($1, $2, $3, $4)", msg.id, t.payer, t.payee, t.cents
            )
    return bool(first)


def consumer(
    url: str, topic: str, receipts: str, pool: Any, name: str, log: TextIO
) -> MessageQueue:
    mq = MessageQueue(
        url, stream=topic, group=GROUP, consumer=name, start=StartFrom.EARLIEST,
        concurrency=CONCURRENCY, claim_idle=1.0, claim_interval=0.2, block=0.2, grace=5.0,
    )  # fmt: skip

    @mq.handler("transfer")
    async def transfer(msg: Message[Transfer]) -> None:
        async with pool.acquire() as conn:
            first = await apply(conn, msg)
        log.write(f"{msg.id} {'applied' if first else 'skipped'} {msg.delivery_count}\n")
        log.flush()
        await anyio.sleep(random.uniform(0, WORK_AFTER_COMMIT))
        await stage(msg, receipts)

    return mq


async def stage(msg: Message[Transfer], receipts: str) -> None:
    """The transfer's Redis effects (2. above) and its receipt (3.), staged: written with
    the entry's ack, so once, or not at all."""
    t = msg.data
    async with msg.transaction() as tx:
        tx.hincrby(tx.key("balances"), t.payer, -t.cents)
        tx.hincrby(tx.key("balances"), t.payee, t.cents)
        tx.hincrby(tx.key("applied"), msg.id, 1)
    receipt = Receipt(transfer=msg.id, payer=t.payer, payee=t.payee, cents=t.cents)
    msg.publish("receipt", receipt, stream=receipts)


async def consume(
    url: str, topic: str, receipts: str, database: str, name: str, log: TextIO
) -> None:
    import asyncpg

    async with (
        asyncpg.create_pool(database, min_size=1, max_size=CONCURRENCY) as pool,
        consumer(url, topic, receipts, pool, name, log) as mq,
        anyio.create_task_group() as tg,
    ):
        await tg.start(mq.run)  # from here SIGTERM/SIGINT is a graceful stop
        log.write(f"{READY}\n")
        log.flush()


def main(url: str, topic: str, receipts: str, database: str, name: str, path: str) -> None:
    setup_logging()
    with open(path, "a", encoding="utf-8") as log:
        anyio.run(consume, url, topic, receipts, database, name, log)


if __name__ == "__main__":
    main(*sys.argv[1:7])
