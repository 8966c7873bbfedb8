"""Fan-out subscribers (``group=None``): every instance receives every entry from its start
position, with typed and batch handlers, on plain and partitioned topics; failures are
retried in process then logged and counted; a deleted stream stops them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import ConfigError, Message, MessageQueue, RetryPolicy, StartFrom
from streamq.testing import TEST_TIMINGS
from tests.helpers.clients import sync_client
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


class Invalidate(BaseModel):
    key: str


def subscriber(url: str, stream: str, **options: Any) -> MessageQueue:
    return MessageQueue(url, stream=stream, group=None, config=TEST_TIMINGS, **options)


def keeper(mq: MessageQueue, type_name: str = "invalidate") -> list[Message[Invalidate]]:
    seen: list[Message[Invalidate]] = []

    @mq.handler(type_name)
    async def keep(msg: Message[Invalidate]) -> None:
        seen.append(msg)

    return seen


async def test_two_instances_both_receive_every_message(redis_url: str, stream: str) -> None:
    one, two = subscriber(redis_url, stream), subscriber(redis_url, stream)
    seen_one, seen_two = keeper(one), keeper(two)
    async with one.running(), two.running():
        ids = [await one.publish("invalidate", Invalidate(key=f"k{n}")) for n in range(20)]
        await wait_for(lambda: len(seen_one) == 20 and len(seen_two) == 20, what="both got all")
    for seen in (seen_one, seen_two):
        assert [m.id for m in seen] == ids or sorted(m.id for m in seen) == sorted(ids)
        assert {m.data.key for m in seen} == {f"k{n}" for n in range(20)}
        assert all(isinstance(m.data, Invalidate) and m.group == "" for m in seen)
    assert one.stats()["handled"] == 20 and one.stats()["acked"] == 0
    # nothing recorded in Redis: no consumer group was created
    async with one:
        assert (await one.topic_info()).groups == []


async def test_partitioned_topic_every_instance_gets_every_partition(
    where: str, topic: str
) -> None:
    publisher = MessageQueue(where, stream=topic, partitions=4, config=TEST_TIMINGS)
    async with publisher:  # records the topic's partitions
        await publisher.publish("invalidate", Invalidate(key="before"), key="x")
    one = subscriber(where, topic, partitions=4)
    two = subscriber(where, topic, partitions=4)
    seen_one, seen_two = keeper(one), keeper(two)
    async with one.running(), two.running(), publisher:
        ids = [
            await publisher.publish("invalidate", Invalidate(key=f"k{n}"), key=f"key-{n}")
            for n in range(24)
        ]
        await wait_for(lambda: len(seen_one) >= 24 and len(seen_two) >= 24, what="all 24")
    assert len({i.partition(":")[0] for i in ids}) > 1  # the keys spread over partitions
    for seen in (seen_one, seen_two):
        assert sorted(m.id for m in seen) == sorted(ids)  # LATEST: not the one before
        assert {m.partition for m in seen} == {int(i.partition(":")[0]) for i in ids}
    assert one.stats()["partitions"] == 4


async def test_latest_earliest_and_at_an_id(redis_url: str, stream: str) -> None:
    publisher = subscriber(redis_url, stream)
    async with publisher:
        old = [await publisher.publish("invalidate", {"key": f"old{n}"}) for n in range(3)]
    latest = subscriber(redis_url, stream)
    earliest = subscriber(redis_url, stream, start=StartFrom.EARLIEST)
    after_first = subscriber(redis_url, stream, start=StartFrom.at(old[0]))
    seen = {"latest": keeper(latest), "earliest": keeper(earliest), "at": keeper(after_first)}
    async with latest.running(), earliest.running(), after_first.running(), publisher:
        new = await publisher.publish("invalidate", {"key": "new"})
        await wait_for(lambda: all(new in [m.id for m in s] for s in seen.values()), what="new")
    assert [m.id for m in seen["latest"]] == [new]
    assert [m.id for m in seen["earliest"]] == [*old, new]
    assert [m.id for m in seen["at"]] == [*old[1:], new]


async def test_batch_handler(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    batches: list[list[str]] = []

    @mq.batch_handler("invalidate", size=5, timeout=0.1)
    async def handle(msgs: list[Message[Invalidate]]) -> None:
        batches.append([m.data.key for m in msgs])

    async with mq.running():
        await mq.publish_many("invalidate", [Invalidate(key=f"k{n}") for n in range(12)])
        await wait_for(lambda: sum(map(len, batches)) == 12, what="12 in batches")
    assert [k for batch in batches for k in batch] == [f"k{n}" for n in range(12)]
    assert max(map(len, batches)) <= 5
    assert mq.stats()["batch_size"]["count"] == len(batches)


async def test_failing_handler_retried_then_logged_and_counted(
    redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    mq = subscriber(redis_url, stream, retry=RetryPolicy(attempts=3, backoff=0.01, jitter=0))
    calls: dict[str, int] = {}
    handled: list[str] = []

    @mq.handler("invalidate")
    async def handle(msg: Message[Invalidate]) -> None:
        calls[msg.data.key] = calls.get(msg.data.key, 0) + 1
        if msg.data.key == "bad":
            raise RuntimeError("cache is down")
        handled.append(msg.data.key)

    caplog.set_level(logging.INFO, logger="streamq")
    async with mq.running():
        for key in ("a", "bad", "b", "c"):
            await mq.publish("invalidate", Invalidate(key=key))
        await wait_for(lambda: mq.stats()["failed"] == 1 and len(handled) == 3, what="failed")
        await mq.publish("invalidate", {"key": 3})  # fails validation: logged and counted too
        await wait_for(lambda: mq.stats()["failed"] == 2, what="the invalid entry failed")
    assert calls["bad"] == 3 and sorted(handled) == ["a", "b", "c"]
    warnings = [
        r.getMessage() for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "streamq.consume.outcomes"
    ]  # fmt: skip
    # one record in full (not one per retry), then the failures of the same type summarised
    assert len(warnings) == 2 and "cache is down" in warnings[0], warnings
    assert "1 more fan-out failures of type 'invalidate'" in warnings[1], warnings
    stats = mq.stats()
    assert stats["failed"] == 2 and stats["retried"] == 1 and stats["dead_lettered"] == 0
    async with mq:
        assert await mq.dead_letters() == []


async def test_types_without_a_handler_are_skipped_logged_once_per_type_and_counted(
    redis_url: str, stream: str, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    mq = subscriber(redis_url, stream)
    handled: list[str] = []

    @mq.handler("invalidate")
    async def handle(msg: Message[Invalidate]) -> None:
        handled.append(msg.data.key)

    caplog.set_level(logging.WARNING, logger="streamq")
    async with mq.running():
        for n in range(3):
            await mq.publish("sms", {"n": n})
            await mq.publish("email", {"n": n})
        await client.xadd(stream, {"data": "{}"})  # no type: bad input
        await mq.publish("invalidate", Invalidate(key="a"))
        await wait_for(lambda: handled == ["a"], what="the handled type")
        stats = mq.stats()
    # received counts every entry read, as in a group: the skipped and the malformed too
    assert (stats["skipped"], stats["failed"], stats["received"]) == (6, 1, 8)
    skips = [r.getMessage() for r in caplog.records if "fan-out subscriber: skipped" in
             r.getMessage()]  # fmt: skip
    assert len(skips) == 2, skips  # one per type, the others summarised
    assert "'sms'" in skips[0] and "'email'" in skips[1]
    summaries = [r.getMessage() for r in caplog.records if "more entries of type" in
                 r.getMessage()]  # fmt: skip
    assert sorted(m.split(" in the last")[0] for m in summaries) == [
        "…and 2 more entries of type 'email' skipped (no handler here)",
        "…and 2 more entries of type 'sms' skipped (no handler here)",
    ], summaries  # when the subscriber stops at the latest
    assert any("malformed entry" in r.getMessage() for r in caplog.records)


@pytest.mark.auto_stop
async def test_a_deleted_stream_stops_the_subscriber(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    seen = keeper(mq)
    async with mq:
        await mq.publish("invalidate", {"key": "x"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await mq.publish("invalidate", {"key": "y"})
            # the stream did not exist when the queue opened: x is after the start too
            await wait_for(lambda: len(seen) == 2, what="x and y handled")
            await mq.client.delete(stream)
            with anyio.fail_after(10):
                await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("stream_deleted", True)


@pytest.mark.auto_stop
async def test_terminate_topic_stops_the_subscriber(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    keeper(mq)
    async with mq:
        await mq.publish("invalidate", {"key": "x"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: mq.stats().get("in_flight") == 0, what="running")
            await mq.terminate_topic()
            with anyio.fail_after(10):
                await mq.done.wait()
    assert (mq.stop_reason, mq.auto_stopped) == ("topic_terminated", True)


async def test_a_subscriber_started_after_a_terminate_reads_the_topic_made_again(
    redis_url: str, stream: str
) -> None:
    """The mark a terminate leaves for the consumers it stops is not about a subscriber
    that started afterwards: it reads the topic that a producer made again."""
    first = subscriber(redis_url, stream)
    keeper(first)
    async with first:
        await first.publish("invalidate", {"key": "old"})
        await first.terminate_topic()
        await first.publish("invalidate", {"key": "new"})  # the topic made again at once
    later = subscriber(redis_url, stream, start=StartFrom.EARLIEST)
    seen = keeper(later)
    async with later.running():
        await wait_for(lambda: len(seen) == 1, what="the new entry")
        await anyio.sleep(TEST_TIMINGS.block * 3)  # empty reads: each looks for the mark
        await later.publish("invalidate", {"key": "newer"})
        await wait_for(lambda: len(seen) == 2, what="the newer entry")
        assert later.stop_reason is None, later.stop_reason
    assert [m.data.key for m in seen] == ["new", "newer"]


async def test_a_stream_created_after_the_start_is_read(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    seen = keeper(mq)
    async with mq.running():
        await anyio.sleep(TEST_TIMINGS.block * 2)  # empty reads of a stream not created yet
        await mq.publish("invalidate", {"key": "first"})
        await wait_for(lambda: len(seen) == 1, what="first")
        assert mq.stop_reason is None


async def test_run_stop_done_and_health(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    started, release = anyio.Event(), anyio.Event()
    finished: list[str] = []

    @mq.handler("invalidate")
    async def slow(msg: Message[Invalidate]) -> None:
        started.set()
        await release.wait()
        finished.append(msg.data.key)

    async with mq:
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: mq.stats() != {}, what="running")
            health = await mq.health()
            assert health["ready"] and health["pending"] is None and health["lag"] is None
            await mq.publish("invalidate", {"key": "in-flight"})
            await started.wait()
            tg.start_soon(mq.stop)
            await anyio.sleep(0.05)
            assert not mq.done.is_set()  # stop drains the running handler first
            release.set()
            with anyio.fail_after(5):
                await mq.done.wait()
        assert finished == ["in-flight"] and mq.stop_reason == "stopped"
        assert not mq.auto_stopped
        # it may run again: it goes on from where it stopped
        await mq.publish("invalidate", {"key": "later"})
        async with mq.running():
            await wait_for(lambda: finished == ["in-flight", "later"], what="later")


async def test_group_operations_refuse_clearly_and_publish_works(
    redis_url: str, stream: str
) -> None:
    mq = subscriber(redis_url, stream)
    async with mq:
        entry_id = await mq.publish("invalidate", {"key": "x"})
        for call in (mq.seek("0"), mq.stop_message(entry_id), mq.resume_message(entry_id)):
            with pytest.raises(ConfigError, match=r"fan-out queue \(group=None\) has no consumer"):
                await call


def test_group_must_be_a_name_or_none(redis_url: str, stream: str) -> None:
    with pytest.raises(ConfigError, match="group must be a non-empty string or None"):
        MessageQueue(redis_url, stream=stream, group="")


@pytest.mark.slow
def test_streamq_run_serves_a_fanout_queue(redis_url: str, stream: str, tmp_path: Path) -> None:
    out = tmp_path / "seen.txt"
    (tmp_path / "fanout_service.py").write_text(
        textwrap.dedent(f"""
        from streamq import Message, MessageQueue

        mq = MessageQueue({redis_url!r}, stream={stream!r}, group=None, block=0.2)

        @mq.handler("invalidate")
        def invalidate(msg: Message[dict]) -> None:
            with open({str(out)!r}, "a") as f:
                f.write(msg.data["key"] + "\\n")
        """)
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "streamq.cli", "run", "fanout_service:mq"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    r = sync_client(redis_url, stream)  # routed: the stream's node on a cluster too
    try:
        # each service starts at `$` when it opens: publish until both got the same one
        deadline, n = time.monotonic() + 30, 0
        lines: list[str] = []
        while time.monotonic() < deadline and not any(lines.count(k) == 2 for k in lines):
            r.xadd(stream, {"type": "invalidate", "data": f'{{"key": "k{n}"}}'})
            n += 1
            time.sleep(0.2)
            lines = out.read_text().split() if out.exists() else []
        assert any(lines.count(k) == 2 for k in lines), lines
    finally:
        for p in procs:
            p.terminate()
        outputs = [p.communicate(timeout=20)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs


async def test_handler_middlewares_wrap_fanout_handlers(redis_url: str, stream: str) -> None:
    mq = subscriber(redis_url, stream)
    seen = keeper(mq)
    wrapped: list[str] = []

    async def around(msg: Any, call_next: Any) -> Any:
        wrapped.append(msg.data.key)
        return await call_next(msg)

    mq.add_middleware(around)
    async with mq.running():
        await mq.publish("invalidate", Invalidate(key="m"))
        await wait_for(lambda: len(seen) == 1, what="handled")
    assert wrapped == ["m"]


async def test_metrics_of_a_fanout_queue(redis_url: str, stream: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from streamq.metrics import QueueCollector

    mq = subscriber(redis_url, stream, consumer="cache-1")
    seen = keeper(mq)
    async with mq.running():
        await mq.publish("invalidate", Invalidate(key="m"))
        await wait_for(lambda: len(seen) == 1, what="handled")
        registry = CollectorRegistry()
        collector = QueueCollector(mq)
        registry.register(collector)
        text = generate_latest(registry).decode()
        collector.close()
    assert f'streamq_handled_total{{consumer="cache-1",group="",stream="{stream}"}} 1.0' in text
    assert f'streamq_failed_total{{consumer="cache-1",group="",stream="{stream}"}} 0.0' in text


async def test_an_app_runs_a_fanout_queue_beside_a_group(redis_url: str, stream: str) -> None:
    from streamq import App

    fanout = subscriber(redis_url, stream, consumer="cache-1")
    worker = MessageQueue(redis_url, stream=stream, group="g", config=TEST_TIMINGS)
    seen_fanout, seen_worker = keeper(fanout), keeper(worker)
    app = App(fanout, worker)
    assert "(fan-out cache-1)" in repr(app)
    async with app.running():
        await worker.publish("invalidate", Invalidate(key="both"))
        await wait_for(lambda: len(seen_fanout) == 1 and len(seen_worker) == 1, what="both")
        assert set(app.stats()) == {f"{stream}/(fan-out cache-1)", f"{stream}/g"}
        health = await app.health()
        assert health["ready"] and health["queues"][0]["group"] is None
    with pytest.raises(ConfigError, match="consumer 'cache-1' of a fan-out subscriber"):
        App(fanout, subscriber(redis_url, stream, consumer="cache-1"))


@pytest.mark.slow
async def test_tail_reads_every_partition_of_a_partitioned_topic(where: str, topic: str) -> None:
    import json

    from tests.helpers.cli import streamq

    async with MessageQueue(where, stream=topic, partitions=4) as mq:
        ids = [await mq.publish("invalidate", {"key": f"k{n}"}, key=f"x{n}") for n in range(12)]
    assert len({i.split(":")[0] for i in ids}) > 1
    result = await anyio.to_thread.run_sync(
        lambda: streamq("tail", topic, "--from", "0", "--count", "12", url=where)
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(ids)  # IDs name their partition
    for partition in {i.split(":")[0] for i in ids}:  # in ID order within each partition
        in_partition = [line["id"] for line in lines if line["id"].startswith(f"{partition}:")]
        assert in_partition == [i for i in ids if i.startswith(f"{partition}:")]
    # new entries only (the default), on a topic whose partitions are followed in turn
    proc = await anyio.open_process(
        [sys.executable, "-m", "streamq.cli", "tail", topic, "--count", "1", "--url", where]
    )
    async with proc, MessageQueue(where, stream=topic, partitions=4) as mq:
        new: list[str] = []
        with anyio.fail_after(30):  # publish until the tail, started at `$`, shows one
            while proc.returncode is None:
                new.append(await mq.publish("invalidate", {"key": "new"}, key=f"n{len(new)}"))
                with anyio.move_on_after(0.3):
                    await proc.wait()
        assert proc.stdout is not None
        out = (await proc.stdout.receive()).decode()
    assert json.loads(out)["id"] in new  # not one of the entries before it started


async def test_reads_no_more_than_max_in_flight_ahead_of_the_handlers(
    redis_url: str, stream: str
) -> None:
    mq = subscriber(redis_url, stream, concurrency=2, max_in_flight=4)
    release, running, done = anyio.Event(), [0], []

    @mq.handler("invalidate")
    async def slow(msg: Message[Invalidate]) -> None:
        running[0] += 1
        await release.wait()
        done.append(msg.data.key)

    async with mq.running():
        await mq.publish_many("invalidate", [Invalidate(key=f"k{n}") for n in range(20)])
        await wait_for(lambda: running[0] == 2 and mq.stats()["in_flight"] == 4, what="full")
        await anyio.sleep(TEST_TIMINGS.block * 3)  # reads that would overshoot had their chance
        assert (running[0], mq.stats()["in_flight"], mq.stats()["received"]) == (2, 4, 4)
        release.set()
        await wait_for(lambda: len(done) == 20, what="all 20")
    assert sorted(done) == sorted(f"k{n}" for n in range(20))


async def test_a_failing_batch_is_retried_then_logged_once_and_counted(
    redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    mq = subscriber(redis_url, stream, retry=RetryPolicy(attempts=2, backoff=0.01, jitter=0))
    calls: list[int] = []

    @mq.batch_handler("invalidate", size=5, timeout=0.5)
    async def handle(msgs: list[Message[Invalidate]]) -> None:
        calls.append(len(msgs))
        if msgs[0].data.key == "bad":
            raise RuntimeError("cache is down")

    caplog.set_level(logging.WARNING, logger="streamq.consume.outcomes")
    async with mq.running():
        await mq.publish_many("invalidate", [Invalidate(key="bad") for _ in range(5)])
        await wait_for(lambda: mq.stats()["failed"] == 5, what="5 failed")
        await mq.publish_many("invalidate", [Invalidate(key="ok") for _ in range(5)])
        await wait_for(lambda: mq.stats()["handled"] == 5, what="the next batch handled")
    assert calls == [5, 5, 5]  # two attempts of the failing batch, then the next one
    mine = [r for r in caplog.records if r.name == "streamq.consume.outcomes"]
    assert len(mine) == 1 and "failed for 5 entries" in mine[0].getMessage()


@pytest.mark.auto_stop
async def test_terminate_under_a_steady_flow_stops_the_subscriber(
    redis_url: str, stream: str
) -> None:
    mq = subscriber(redis_url, stream)
    seen = keeper(mq)
    async with mq:
        client = mq.client

        async def produce() -> None:  # a foreign producer, which makes the stream anew
            n = 0
            while True:
                await client.xadd(stream, {"type": "invalidate", "data": f'{{"key": "k{n}"}}'})
                n += 1
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            tg.start_soon(produce)
            await wait_for(lambda: len(seen) > 5, what="flowing")
            await mq.terminate_topic()
            with anyio.fail_after(10):
                await mq.done.wait()
            tg.cancel_scope.cancel()
    assert (mq.stop_reason, mq.auto_stopped) == ("topic_terminated", True)


async def test_an_idle_partition_does_not_hold_the_room_of_a_busy_one(
    redis_url: str, stream: str
) -> None:
    publisher = MessageQueue(redis_url, stream=stream, partitions=2)
    mq = MessageQueue(
        redis_url, stream=stream, group=None, partitions=2, start=StartFrom.EARLIEST,
        max_in_flight=10, read_count=10, concurrency=4, block=5,
    )  # fmt: skip
    seen = keeper(mq)
    async with publisher:
        ids = await publisher.publish_many("invalidate", [{"key": f"k{n}"} for n in range(40)],
                                           key=lambda _: "same")  # fmt: skip
        assert len({i.split(":")[0] for i in ids}) == 1  # all in one partition
        async with mq.running():
            # the idle partition's reader blocks 5 s a read: it must not hold all the room
            await wait_for(lambda: len(seen) == 40, timeout=4, what="all 40 of the busy one")
