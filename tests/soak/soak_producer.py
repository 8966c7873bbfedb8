"""A producer process of the fault soak (``make test-soak``).

Publishes ``COUNT`` jobs at ``RATE`` per second with ``publish_many`` in small chunks. The
IDs of a chunk are appended to ``OUT`` (flushed and fsynced) only once XADD acknowledged
them: those, and only those, are "published". A chunk that fails (server down, connection
killed) is sent again; entries of the failed attempt that did reach the stream are not
counted as published (the soak reports them as handled extras).

Usage: python -m tests.soak.soak_producer URL STREAM INDEX COUNT RATE SEED POISON_RATE OUT SECONDS
[MODE PRODUCERS] (MODE ``ordered``: keyed jobs, one at a time, see :mod:`tests.soak.ordered`;
``exactly-once``: transfers, see :mod:`tests.soak.exactly_once`)
Prints ``done <published> <failed attempts>`` at the end.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from typing import TextIO

import anyio

from streamq import MessageQueue, StreamqError
from tests.soak.ordered import KEYS, PARTITIONS, key_name
from tests.soak.soak_consumer import GROUP, MESSAGE_TYPE, Job

CHUNK = 50
RETRY_PAUSE = 0.2
MAX_CATCH_UP = 1.0  # seconds of backlog published in a burst after an outage

log = logging.getLogger(__name__)


def record(out: TextIO, ids: list[str], jobs: list[Job]) -> None:
    out.write("".join(f"{i} {int(job.poison)}\n" for i, job in zip(ids, jobs, strict=True)))
    out.flush()
    os.fsync(out.fileno())


async def publish(mq: MessageQueue, jobs: list[Job], out: TextIO) -> bool:
    try:
        ids = await mq.publish_many(MESSAGE_TYPE, jobs)
    except StreamqError as e:
        log.warning("publish failed, sending the chunk again: %s", e)
        return False
    record(out, ids, jobs)
    return True


async def produce_ordered(mq: MessageQueue, producer: int, keys: int, job: Job,
                          out: TextIO, seqs: dict[str, int]) -> bool:  # fmt: skip
    """Publish one keyed job (seq: the next of its key, raised only once acknowledged)."""
    key = key_name(producer, job.seq % keys)
    keyed = Job(producer=producer, seq=seqs.get(key, 0), poison=job.poison, key=key)
    try:
        entry_id = await mq.publish(MESSAGE_TYPE, keyed, key=key)
    except StreamqError as e:
        log.warning("publish failed, sending it again: %s", e)
        return False
    seqs[key] = keyed.seq + 1
    record(out, [entry_id], [keyed])
    return True


async def produce(args: list[str], out: TextIO) -> None:
    url, stream, index, count, rate, seed, poison_rate, _, seconds, mode, producers = args
    if mode == "ordered":
        await produce_keyed(args, out, int(producers))
        return
    if mode == "exactly-once":
        from tests.soak.exactly_once import produce_transfers

        await produce_transfers(args, out)
        return
    producer, total, per_second = int(index), int(count), float(rate)
    rng, deadline = random.Random(int(seed)), time.monotonic() + float(seconds)
    mq = MessageQueue(url or None, stream=stream, group=GROUP)  # publishing only: never opened
    sent = failures = 0
    next_at = time.monotonic()
    while sent < total and time.monotonic() < deadline:
        size = min(CHUNK, total - sent)
        jobs = [Job(producer=producer, seq=sent + i, poison=rng.random() < float(poison_rate))
                for i in range(size)]  # fmt: skip
        if not await publish(mq, jobs, out):
            failures += 1
            await anyio.sleep(RETRY_PAUSE)
            continue
        sent += size
        next_at = max(next_at + size / per_second, time.monotonic() - MAX_CATCH_UP)
        await anyio.sleep(max(0.0, next_at - time.monotonic()))
    await mq.aclose()
    print(f"done {sent} {failures}", flush=True)


async def produce_keyed(args: list[str], out: TextIO, producers: int) -> None:
    """Ordered mode: one job at a time, keyed, this producer's share of KEYS keys."""
    url, stream, index, count, rate, seed, poison_rate, _, seconds, _, _ = args
    producer, total, per_second = int(index), int(count), float(rate)
    keys = max(1, KEYS // producers)
    rng, deadline = random.Random(int(seed)), time.monotonic() + float(seconds)
    mq = MessageQueue(url or None, stream=stream, group=GROUP, partitions=PARTITIONS)
    sent = failures = 0
    seqs: dict[str, int] = {}
    next_at = time.monotonic()
    while sent < total and time.monotonic() < deadline:
        job = Job(producer=producer, seq=sent, poison=rng.random() < float(poison_rate))
        if not await produce_ordered(mq, producer, keys, job, out, seqs):
            failures += 1
            await anyio.sleep(RETRY_PAUSE)
            continue
        sent += 1
        next_at = max(next_at + 1 / per_second, time.monotonic() - MAX_CATCH_UP)
        await anyio.sleep(max(0.0, next_at - time.monotonic()))
    await mq.aclose()
    print(f"done {sent} {failures}", flush=True)


def main(args: list[str]) -> None:
    with open(args[7], "a", encoding="ascii") as out:
        anyio.run(produce, args, out)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    main(([*sys.argv[1:12], "plain", "1"])[:11])
