"""Redis effects with the ack in every mode with a group (DESIGN.md "Redis effects with the
ack"; docs/guides/effects.md "Redis commands with the ack"): the commands a handler stages
in ``msg.transaction()`` run with its entry's ack, once per entry, or not at all; a failed
attempt (an error, a signal, an exception inside the block) runs none of its commands; a
handler that runs twice (its process killed after staging, before the ack) applies them
once; a request's reply, its outputs and its commands go together. Fan-out has no ack:
``msg.transaction()`` raises there."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, Reject, Retry, RetryPolicy, Throttle
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from tests.consume.contract.modes import Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

TX_DOC = "docs/guides/effects.md 'Redis commands with the ack' (fan-out has no ack)"
ClientFor = Callable[[str], aioredis.Redis]


def grouped_only(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="run commands with an ack", where=TX_DOC)


def counts_keys(mode: Mode) -> list[str]:
    """``tx.key("counts")`` of each of the mode's source streams."""
    return [f"{{{s}}}:counts" for s in partition_streams(mode.stream, mode.partitions)]


async def counts(client_for: ClientFor, mode: Mode) -> Counter[int]:
    """The sum of every source stream's ``counts`` hash (deleted afterwards)."""
    total: Counter[int] = Counter()
    for key in counts_keys(mode):
        for field, value in (await client_for(key).hgetall(key)).items():
            total[int(field)] += int(value)
    return total


@pytest.fixture(autouse=True)
def _cleanup(mode: Mode, redis_url: str) -> Iterator[None]:
    yield None
    for key in counts_keys(mode):
        delete_stream_keys(redis_url, key)


async def test_commands_run_once_with_the_ack(mode: Mode, client_for: ClientFor) -> None:
    grouped_only(mode)
    mq = mode.queue()
    handled: list[int] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
            tx.sadd(tx.key("seen"), msg.data)
            tx.delete(tx.key("seen"))
        handled.append(msg.data)

    async with mq:
        await mq.publish_many("order", list(range(20)), key=lambda n: keys(20)[n])
        async with mq.running():
            await wait_for(lambda: len(handled) == 20, what="20 entries handled")
            await all_acked(mq)
    assert await counts(client_for, mode) == Counter(range(20))


async def test_a_command_that_fails_in_the_ack_dead_letters_its_entry(
    mode: Mode, client_for: ClientFor
) -> None:
    """A command failing inside the ack's script (WRONGTYPE) cannot be undone with the
    entry's earlier commands and its ack: the entry is dead-lettered with the reason, so
    nothing is lost; the other entries go on."""
    grouped_only(mode)
    mq = mode.queue()
    handled: list[int] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
            if msg.data == 2:
                tx.incrby(tx.key("counts"), 1)  # a hash: WRONGTYPE
        handled.append(msg.data)

    async with mq:
        await mq.publish_many("order", list(range(4)), key=lambda n: keys(4)[n])
        async with mq.running():
            await wait_for(lambda: len(handled) == 4, what="4 entries handled")
            await all_acked(mq)
            await wait_for(lambda: mq.stats()["dead_lettered"] == 1, what="one dead letter")
        letters = await mq.dead_letters()
    assert [letter.type for letter in letters] == ["order"]
    assert "stopped at its command 2 (INCRBY)" in letters[0].error, letters[0].error
    assert "WRONGTYPE" in letters[0].error
    assert await counts(client_for, mode) == Counter(range(4)), "commands before it: applied"


@pytest.mark.parametrize("failure", ["error", "in-block", "retry", "throttle", "reject"])
async def test_a_failed_attempt_runs_none_of_its_commands(
    mode: Mode, client_for: ClientFor, failure: str
) -> None:
    grouped_only(mode)
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, jitter=0.0)
    mq = mode.queue(retry=retry, claim_idle=0.3, claim_interval=0.05)
    runs: Counter[int] = Counter()

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        runs[msg.data] += 1
        first = runs[msg.data] == 1
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
            if first and failure == "in-block":
                raise RuntimeError("fails inside the block")
        if first or failure == "reject":
            if failure == "retry":
                raise Retry(delay=0.05)
            if failure == "throttle":
                raise Throttle(0.05)
            if failure == "reject":
                raise Reject("not wanted")
            raise RuntimeError("fails after its transaction")

    async with mq:
        await mq.publish_many("order", list(range(4)), key=lambda n: keys(4)[n])
        async with mq.running():
            want = 4 if failure == "reject" else 8
            await wait_for(lambda: sum(runs.values()) == want, what="each entry run")
            await all_acked(mq)
    expected = Counter() if failure == "reject" else Counter(range(4))
    assert await counts(client_for, mode) == expected, "the second run's commands only"


async def test_a_request_replies_publishes_and_runs_its_commands_with_its_ack(
    mode: Mode, client_for: ClientFor, redis_url: str
) -> None:
    grouped_only(mode)
    mq = mode.queue()
    target = f"{mode.stream}-out"

    @mq.handler("quote")
    async def quote(msg: Message[int]) -> int:
        msg.publish("quoted", msg.data, stream=target)
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
        return msg.data * 2

    try:
        async with mq.running():
            assert await mq.request("quote", 21, key="k", timeout=10) == 42
            await all_acked(mq)
        assert await counts(client_for, mode) == Counter([21])
        assert await client_for(target).xlen(target) == 1
    finally:
        delete_stream_keys(redis_url, target)


async def test_fan_out_refuses_a_transaction(mode: Mode) -> None:
    mode.skip_unless("fanout", does_not="refuse msg.transaction (it has an ack)", where=TX_DOC)
    mq = mode.queue()
    errors: list[BaseException] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        try:
            msg.transaction()
        except ConfigError as e:
            errors.append(e)

    async with mq.running():
        await mq.publish("order", 1)
        await wait_for(lambda: len(errors) == 1, what="the handler's error")
    assert "fan-out subscriber" in str(errors[0])


async def test_a_handler_killed_after_its_transaction_applies_it_once(
    mode: Mode, client_for: ClientFor, redis_url: str
) -> None:
    grouped_only(mode)
    count = 12
    mq = mode.queue()
    async with mq:
        await mq.publish_many("order", list(range(count)), key=lambda n: keys(count)[n])
    with anyio.fail_after(60):
        crashed = await anyio.run_process(
            [sys.executable, "-m", "tests.helpers.transaction_consumer", redis_url, mode.stream,
             mode.kind, str(mode.partitions)],
            env={**os.environ, "PYTHONPATH": os.getcwd()}, check=False,
        )  # fmt: skip
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]
    assert 7 not in await counts(client_for, mode), "the killed handler's commands did not run"
    handled: list[int] = []
    survivor = mode.queue(consumer="survivor")

    @survivor.handler("order")
    async def order(msg: Message[int]) -> None:
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
        handled.append(msg.data)

    async with survivor.running():
        await wait_for(lambda: 7 in handled, what="the killed entry handled again", timeout=20)
        await all_acked(survivor)
    assert await counts(client_for, mode) == Counter(range(count))
