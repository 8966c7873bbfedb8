"""Outputs with the ack in every mode with a group (DESIGN.md "Effectively-once effects and
request-reply"; docs/guides/effects.md "Outputs with the ack"): what a handler stages with
``msg.publish`` is written with its entry's ack or not at all; a failed attempt writes none
of its outputs; a handler that runs twice (its process killed after staging, before the
ack) leaves each output once; batch handlers write each acked entry's outputs; a request's
reply and its outputs go together. Fan-out has no ack: ``msg.publish`` raises there."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, PartialFailure, Retry, RetryPolicy
from streamq.testing import delete_stream_keys
from tests.consume.contract.modes import Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

OUTPUTS_DOC = "docs/guides/effects.md 'Outputs with the ack' (fan-out has no ack)"
ClientFor = Callable[[str], aioredis.Redis]


def grouped_only(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="write outputs with an ack", where=OUTPUTS_DOC)


@pytest.fixture
def target(stream: str, redis_url: str) -> Iterator[str]:
    """A plain stream for the outputs, deleted after the test."""
    name = f"{stream}-out"
    yield name
    delete_stream_keys(redis_url, name)


async def written(client_for: ClientFor, target: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in await client_for(target).xrange(target)]


async def settled(mq: MessageQueue) -> None:
    """Every entry acknowledged and, on a cluster, every output for another slot forwarded
    from the outbox (by the running consumers: wait before they stop)."""
    await all_acked(mq)

    async def forwarded() -> bool:
        return (await mq.topic_info()).outbox == 0

    await wait_for(forwarded, what="the outbox forwarded")


def numbers(entries: list[dict[bytes, bytes]]) -> Counter[int]:
    return Counter(int(fields[b"data"]) for fields in entries)


async def test_outputs_are_written_with_the_ack(
    mode: Mode, target: str, client_for: ClientFor
) -> None:
    grouped_only(mode)
    mq = mode.queue()
    audited: list[int] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        msg.publish("shipped", msg.data, stream=target, key=msg.key, meta={"by": "order"})
        msg.publish("audit", msg.data, key=msg.key)  # the handler's own topic

    @mq.handler("audit")
    async def audit(msg: Message[int]) -> None:
        audited.append(msg.data)

    async with mq:
        await mq.publish_many("order", list(range(20)), key=lambda n: keys(20)[n])
        async with mq.running():
            await wait_for(lambda: len(audited) == 20, what="20 audit outputs handled")
            await settled(mq)
    entries = await written(client_for, target)
    assert numbers(entries) == Counter(range(20))
    assert {fields[b"type"] for fields in entries} == {b"shipped"}
    assert {fields[b"meta"] for fields in entries} == {b'{"by":"order"}'}
    assert {fields[b"key"] for fields in entries} == {k.encode() for k in keys(20)}
    assert sorted(audited) == list(range(20))


@pytest.mark.parametrize("failure", ["error", "retry-signal", "in-process-retry", "timeout"])
async def test_a_failed_attempt_writes_none_of_its_outputs(
    mode: Mode, target: str, client_for: ClientFor, failure: str
) -> None:
    grouped_only(mode)
    attempts = 2 if failure == "in-process-retry" else 1
    retry = RetryPolicy(attempts=attempts, backoff=0.01, max_backoff=0.05, jitter=0.0)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05, handler_timeout=1.0)
    runs: Counter[int] = Counter()

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        runs[msg.data] += 1
        msg.publish("shipped", {"n": msg.data, "run": runs[msg.data]}, stream=target)
        if runs[msg.data] == 1:
            if failure == "retry-signal":
                raise Retry(delay=0.05)
            if failure == "timeout":
                await anyio.sleep(5)
            raise RuntimeError("fails after staging its output")

    async with mq:
        await mq.publish_many("order", list(range(4)), key=lambda n: keys(4)[n])
        async with mq.running():
            await wait_for(lambda: sum(runs.values()) == 8, what="each entry run twice")
            await settled(mq)
    entries = await written(client_for, target)
    assert sorted(entries_data(entries)) == [(n, 2) for n in range(4)], "the second run's only"


def entries_data(entries: list[dict[bytes, bytes]]) -> list[tuple[int, int]]:
    return [(d["n"], d["run"]) for d in (json.loads(f[b"data"]) for f in entries)]


async def test_a_batch_writes_the_outputs_of_its_acked_entries_only(
    mode: Mode, target: str, client_for: ClientFor
) -> None:
    grouped_only(mode)
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    calls = 0

    @mq.batch_handler("job", size=8, timeout=0.05)
    async def store(msgs: list[Message[int]]) -> None:
        nonlocal calls
        calls += len(msgs)
        for m in msgs:
            m.publish("stored", {"n": m.data, "run": m.delivery_count}, stream=target)
        odd = {m.id: "odd fails once" for m in msgs if m.data % 2 and m.delivery_count == 1}
        if odd:
            raise PartialFailure(odd)

    async with mq:
        await mq.publish_many("job", list(range(8)), key=lambda n: keys(8)[n])
        async with mq.running():
            await wait_for(lambda: calls == 12, what="8 calls and the 4 odd ones again")
            await settled(mq)
    got = sorted(entries_data(await written(client_for, target)))
    assert got == sorted([(n, 1) for n in range(0, 8, 2)] + [(n, 2) for n in range(1, 8, 2)])


async def test_a_request_writes_its_reply_and_outputs_with_its_ack(
    mode: Mode, target: str, client_for: ClientFor
) -> None:
    grouped_only(mode)
    mq = mode.queue()

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> int:
        msg.publish("quoted", msg.data, stream=target)
        return msg.data * 2

    async with mq.running():
        assert await mq.request("quote", 21, key="k", timeout=10) == 42
        await settled(mq)
    assert numbers(await written(client_for, target)) == Counter([21])


async def test_fan_out_refuses_to_stage_outputs(mode: Mode) -> None:
    mode.skip_unless("fanout", does_not="refuse msg.publish (it has an ack)", where=OUTPUTS_DOC)
    mq = mode.queue()
    errors: list[BaseException] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        try:
            msg.publish("shipped", msg.data)
        except Exception as e:
            errors.append(e)

    async with mq.running():
        await mq.publish("order", 1)
        await wait_for(lambda: len(errors) == 1, what="the handler's error")
    assert "fan-out subscriber" in str(errors[0]) and "mq.publish" in str(errors[0])


async def test_a_handler_killed_after_staging_leaves_each_output_once(
    mode: Mode, target: str, client_for: ClientFor, redis_url: str, stream: str
) -> None:
    grouped_only(mode)
    count = 12
    mq = mode.queue()
    async with mq:
        await mq.publish_many("order", list(range(count)), key=lambda n: keys(count)[n])
    with anyio.fail_after(60):
        crashed = await anyio.run_process(
            [sys.executable, "-m", "tests.helpers.outputs_consumer", redis_url, stream, target,
             mode.kind, str(mode.partitions)],
            env={**os.environ, "PYTHONPATH": os.getcwd()}, check=False,
        )  # fmt: skip
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]
    before = numbers(await written(client_for, target))
    assert 7 not in before, "the killed handler's outputs were not written"
    handled: list[int] = []
    survivor = mode.queue(consumer="survivor")

    @survivor.handler("order")
    async def order(msg: Message[int]) -> None:
        msg.publish("shipped", msg.data, stream=target)
        handled.append(msg.data)

    async with survivor.running():
        await wait_for(lambda: 7 in handled, what="the killed entry handled again", timeout=20)
        await wait_for(lambda: len(handled) + sum(before.values()) >= count, what="all handled")
        await settled(survivor)
    assert numbers(await written(client_for, target)) == Counter(range(count))
