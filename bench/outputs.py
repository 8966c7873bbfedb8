"""Outputs with the ack (DESIGN.md, "Benchmarks"); ``python -m bench.outputs`` runs them
alone, ``make bench`` with the others.

* ``consume_with_output``: one consumer drains the workload one entry per handler call,
  each handler staging one output (``msg.publish`` to a stream of its own), written with
  the entry's ack; as a ratio to the same run without the output (``consume_single``'s
  settings), rounds taken in turn (the median over rounds; goal >= 0.6).
* ``consume_with_output_cluster``: the same on an embedded cluster of 3 masters, the
  output's stream on another slot than the source's (it goes through the source's outbox
  and is forwarded), against the same run without outputs on that cluster (goal >= 0.4).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import anyio

from streamq import Message
from streamq.server import EmbeddedCluster
from streamq.wire.slots import slot_of

from .workload import Email, figures_cli, fresh_stream, payload, queue

Emit = Any


def _target(source: str) -> str:
    """A stream for the outputs on another slot than ``source`` (on a cluster: another
    slot, so the outputs go through the outbox)."""
    while True:
        target = fresh_stream("receipts")
        if slot_of(target) != slot_of(source):
            return target


async def drain(url: str, n: int, with_output: bool) -> float:
    """Entries per second one consumer takes to drain ``n`` entries (prefilled, not timed),
    until its final ack flush and, with outputs, until every output is in its stream."""
    stream = fresh_stream("outputs")
    target = _target(stream)
    mq = queue(url, stream)
    handled = 0

    @mq.handler("email")
    async def handle(msg: Message[Email]) -> None:
        nonlocal handled
        if with_output:
            msg.publish("receipt", {"to": msg.data.to}, stream=target)
        handled += 1

    async with mq:
        for start in range(0, n, 2000):  # through the queue: a cluster's slots are followed
            await mq.publish_many("email", [payload(i) for i in range(start, min(n, start + 2000))])
        client = mq.client_for(target)
        t0 = time.perf_counter()
        async with mq.running():  # leaving it stops the consumer after its final ack flush
            # polled: the outputs' count is the server's (on a cluster, once forwarded)
            while handled < n or (with_output and await client.xlen(target) < n):  # noqa: ASYNC110
                await anyio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        assert (await mq.topic_info()).pending == 0, "bench consumer left entries pending"
        for name in (stream, target):
            await mq.client_for(name).delete(name)
    return n / elapsed


async def ratio(url: str, n: int, rounds: int) -> tuple[list[float], list[float], float]:
    """(rates with an output, rates without, the median over rounds of their ratio)."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):  # in turn: the machine's drift hits both alike
        for with_output in (False, True):
            rates[with_output].append(await drain(url, n, with_output))
    median = statistics.median(a / b for a, b in zip(rates[True], rates[False], strict=True))
    return rates[True], rates[False], median


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    n = 5_000 if quick else 30_000
    outputs, plain, median = await ratio(url, n, rounds)
    emit(bench="consume_with_output", msgs=n, msgs_per_s=round(max(outputs)),
         plain_msgs_per_s=round(max(plain)), ratio_to_plain=round(median, 3),
         runs=[round(r) for r in outputs], plain_runs=[round(r) for r in plain],
         goal=0.6)  # fmt: skip
    with EmbeddedCluster(masters=3) as cluster:
        outputs, plain, median = await ratio(cluster.url, n // 2, rounds)
    emit(bench="consume_with_output_cluster", msgs=n // 2, masters=3,
         msgs_per_s=round(max(outputs)), plain_msgs_per_s=round(max(plain)),
         ratio_to_plain=round(median, 3), runs=[round(r) for r in outputs],
         plain_runs=[round(r) for r in plain], goal=0.4)  # fmt: skip


if __name__ == "__main__":
    figures_cli("streamq outputs-with-the-ack figures (JSON lines)", figures)
