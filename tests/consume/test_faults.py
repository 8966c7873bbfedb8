"""Faults with real processes and a real server: SIGKILLed consumers, a server restart
under load, dropped connections. Nothing may be lost."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import EmbeddedServer, Message, MessageQueue, Retry, RetryPolicy, StartFrom
from tests.helpers.clients import pending_count
from tests.helpers.fault_consumer import MAX_IN_FLIGHT
from tests.helpers.queues import FAST, QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def spawn(url: str, stream: str, name: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fault_consumer", url, stream, name],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready", f"consumer {name} did not start"
    return process


def slow_consumer(
    url: str, stream: str, concurrency: int | None = None
) -> tuple[MessageQueue, set[str]]:
    """Consumer ``c`` of group ``g`` from the earliest entry (fast timings, ``concurrency``)
    whose ``job`` handler takes a millisecond and keeps each ID it handled, in the set
    returned beside the queue."""
    mq = MessageQueue(url, stream=stream, group="g", consumer="c", start=StartFrom.EARLIEST,
                      config=FAST, concurrency=concurrency)  # fmt: skip
    handled: set[str] = set()

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        await anyio.sleep(0.001)
        handled.add(msg.id)

    return mq, handled


async def wait_all_handled_and_acked(
    mq: MessageQueue, handled: set[str], ids: set[str], after: str
) -> None:
    """Wait for every one of ``ids`` handled, then for nothing pending in group ``g``;
    ``after`` names the fault for the failure's message."""
    await wait_for(lambda: handled >= ids, timeout=30, what=f"all handled after {after}")

    async def nothing_pending() -> bool:
        return await pending_count(mq.client, mq.stream, "g") == 0

    await wait_for(nothing_pending, timeout=15, what=f"acks after {after}")


@pytest.mark.timeout(120)
async def test_sigkilled_consumers_lose_nothing(
    redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    total, kills = 5000, 3
    publisher = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST)
    async with publisher:
        ids = set(await publisher.publish_many("job", list(range(total))))
    key = f"handled:{stream}"
    procs = {name: spawn(redis_url, stream, name) for name in ("k1", "k2", "k3")}
    try:
        for _ in range(kills):
            await anyio.sleep(0.4)
            procs["k1"].kill()  # SIGKILL: no cleanup, entries left in its PEL
            procs["k1"].wait()
            procs["k1"].stdout.close()  # type: ignore[union-attr]
            procs["k1"] = spawn(redis_url, stream, "k1")

        async def all_handled_and_acked() -> bool:
            handled = {i.decode() for i in await client.lrange(key, 0, -1)}
            return handled >= ids and await pending_count(client, stream, "g") == 0

        await wait_for(all_handled_and_acked, timeout=60, what="every entry handled and acked")
    finally:
        for process in procs.values():
            process.send_signal(signal.SIGTERM)
        outputs = {name: p.communicate(timeout=20)[0] for name, p in procs.items()}
    for name, process in procs.items():
        assert process.returncode == 0, f"{name} did not exit cleanly on SIGTERM"
        assert "stopped: signal" in outputs[name]
    counts = Counter(i.decode() for i in await client.lrange(key, 0, -1))
    duplicates = sum(n - 1 for n in counts.values())
    # only entries in flight (or handled but not yet acked) at a kill may run twice
    assert duplicates <= kills * 2 * MAX_IN_FLIGHT, f"{duplicates} duplicates for {kills} kills"
    await client.delete(key)


@pytest.mark.timeout(60)
async def test_server_restart_under_load_with_aof(stream: str) -> None:
    with EmbeddedServer(appendonly=True) as server:
        mq, handled = slow_consumer(server.url, stream, concurrency=4)
        async with mq:
            ids = set(await mq.publish_many("job", list(range(3000))))
            async with anyio.create_task_group() as tg:
                tg.start_soon(mq.run)
                await wait_for(lambda: len(handled) > 300, what="consumption to start")
                await anyio.to_thread.run_sync(server.restart)
                assert len(handled) < len(ids), "restart came too late to test anything"
                await wait_all_handled_and_acked(mq, handled, ids, after="restart")
                await mq.stop()
            assert mq.stop_reason == "stopped"


@pytest.mark.timeout(60)
async def test_connections_killed_mid_batch(
    redis_url: str, stream: str, client: aioredis.Redis
) -> None:
    mq, handled = slow_consumer(redis_url, stream)
    async with mq:
        ids = set(await mq.publish_many("job", list(range(2000))))
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            for _ in range(3):
                await wait_for(lambda: len(handled) > 0)
                await client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                await client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                await anyio.sleep(0.1)
            await wait_all_handled_and_acked(mq, handled, ids, after="connection kills")
            await mq.stop()
    assert mq.auto_stopped is False


@pytest.mark.timeout(60)
async def test_a_dropped_connection_runs_no_entry_its_consumer_left_waiting(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """After a lost connection the read loop recovers its own pending list, less what its
    consumer left there on purpose: an entry waiting out ``Retry(delay)`` comes back after
    its delay, a failed one after ``claim_idle``, and neither at the reconnection; the
    recoveries count no delivery of them (each comes back as its second)."""
    mq = make_queue(claim_idle=4.0, claim_interval=0.1, retry=RetryPolicy(attempts=1))
    calls: list[tuple[str, float]] = []
    counts: list[tuple[str, int]] = []

    @mq.handler("job")
    async def handle(msg: Message[str]) -> None:
        calls.append((msg.data, anyio.current_time()))
        counts.append((msg.data, msg.delivery_count))
        if len([name for name, _ in calls if name == msg.data]) == 1:
            raise Retry(delay=4.0) if msg.data == "retry" else RuntimeError("first delivery")

    async with mq, mq.running():
        await mq.publish_many("job", ["retry", "failed"])
        await wait_for(lambda: len(calls) == 2, what="both first deliveries")
        started = anyio.current_time()
        for _ in range(2):
            await anyio.sleep(0.3)
            await client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        await wait_for(lambda: len(calls) == 4, timeout=20, what="both second deliveries")
    again = {name: at - started for name, at in calls[2:]}
    assert min(again.values()) >= 3.5, f"delivered again {again} s after the first (asked: 4 s)"
    assert sorted(counts[2:]) == [("failed", 2), ("retry", 2)], f"deliveries counted: {counts}"
