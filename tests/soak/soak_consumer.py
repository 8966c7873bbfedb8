"""A consumer process of the fault soak (``make test-soak``).

Records every entry it handles with ``HINCRBY`` on the soak's results hash *before* the
handler returns, so before streamq acks it: an entry handled and then SIGKILLed before its
ack still counts as handled (and its redelivery counts as a duplicate).

Usage: python -m tests.soak.soak_consumer URL STREAM CONSUMER SEED FAIL_RATE [MODE RUN_DIR
DATABASE] (MODE ``ordered``: :mod:`tests.soak.ordered`, which records calls in RUN_DIR;
``exactly-once``: the ledger of :mod:`tests.soak.exactly_once`, its PostgreSQL at DATABASE,
with no results hash: what it applied is the ledger's)
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel

from streamq import CleanupPolicy, Message, MessageQueue, RetryPolicy, StartFrom

GROUP = "soak"
MESSAGE_TYPE = "job"
CLAIM_IDLE = 1.0
BLOCK = 0.2  # seconds a read waits for new entries
MAX_DELIVERIES = 6
# Cleanup passes run in every consumer, as in production (the faults stop and resume
# entries meanwhile): an entry they remove before it is handled shows as lost.
CLEANUP = CleanupPolicy(enabled=True, interval=0.5, max_stream_length=200, min_retention=0)
WORK_SECONDS = 0.003  # upper bound of the simulated work per entry


class Job(BaseModel):
    """The soak's payload: who published it, its sequence number, and whether it must fail."""

    producer: int
    seq: int
    poison: bool = False
    key: str = ""  # ordered mode: the job's key (its seq counts within the key)


class PoisonError(Exception):
    """Raised on every delivery of a poison job: it must end as a dead letter."""


class TransientError(Exception):
    """Raised at random: the in-process retry (or a redelivery) must get past it."""


def results_key(stream: str) -> str:
    """Hash: entry ID -> how many times a handler completed it (same slot as the stream)."""
    return f"soak:{{{stream}}}:handled"


def make_queue(url: str, stream: str, consumer: str, seed: int, fail_rate: float) -> MessageQueue:
    mq = MessageQueue(  # no URL (""): the shared embedded server of $STREAMQ_HOME
        url or None, stream=stream, group=GROUP, consumer=consumer, start=StartFrom.EARLIEST,
        retry=RetryPolicy(attempts=3, backoff=0.05, max_deliveries=MAX_DELIVERIES),
        claim_idle=CLAIM_IDLE, claim_interval=0.2, block=BLOCK, grace=5.0,
        concurrency=8, max_in_flight=32, read_count=32, cleanup=CLEANUP,
    )  # fmt: skip
    rng = random.Random(seed)
    key = results_key(stream)

    @mq.handler(MESSAGE_TYPE)
    async def handle(msg: Message[Job]) -> None:
        if msg.data.poison:
            raise PoisonError(f"poison job {msg.data.producer}/{msg.data.seq}")
        if rng.random() < fail_rate:
            raise TransientError("injected transient failure")
        await anyio.sleep(rng.uniform(0, WORK_SECONDS))
        # Recorded before returning, hence before the ack: "handled" is never missed.
        await mq.client.hincrby(key, msg.id, 1)

    return mq


async def print_stats_on_sigusr1(
    mq: MessageQueue, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """``stats {json}`` on stdout at each SIGUSR1: the soak asks once everything settled
    (entries still counted in flight then would starve this consumer of room)."""
    with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
        task_status.started()
        async for _ in signals:
            stats = {k: v for k, v in mq.stats().items() if isinstance(v, int)}
            print("stats " + json.dumps(stats, sort_keys=True), flush=True)


async def main(args: list[str]) -> None:
    url, stream, consumer, seed, fail_rate, mode, run_dir, database = args
    if mode == "exactly-once":
        import asyncpg

        from tests.soak.exactly_once import ledger_queue

        async with asyncpg.create_pool(database, min_size=1, max_size=8) as pool:
            await serve(ledger_queue(url, stream, consumer, int(seed), float(fail_rate), pool,
                                     GROUP, MAX_DELIVERIES))  # fmt: skip
        return
    if mode == "ordered":
        from tests.soak.ordered import make_ordered_queue

        mq = make_ordered_queue(url, stream, consumer, int(seed), float(fail_rate),
                                Path(run_dir), GROUP, MESSAGE_TYPE, WORK_SECONDS,
                                MAX_DELIVERIES)  # fmt: skip
    else:
        mq = make_queue(url, stream, consumer, int(seed), float(fail_rate))
    await serve(mq)


async def serve(mq: MessageQueue) -> None:
    """Run ``mq`` until SIGTERM; ``ready`` once it runs, ``stopped: <reason>`` at the end."""
    async with mq, anyio.create_task_group() as tg:
        await tg.start(print_stats_on_sigusr1, mq)
        async with anyio.create_task_group() as runs:
            await runs.start(mq.run)  # ready: a SIGTERM from now on is a graceful stop
            print("ready", flush=True)
        tg.cancel_scope.cancel()
    print(f"stopped: {mq.stop_reason}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    # SOAK_LOG_LEVEL=INFO: also what ordered mode does (takeovers, releases) in the logs
    logging.getLogger("streamq.consume").setLevel(os.environ.get("SOAK_LOG_LEVEL", "WARNING"))
    anyio.run(main, ([*sys.argv[1:9], "plain", "", ""])[:8])
