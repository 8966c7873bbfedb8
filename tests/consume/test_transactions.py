"""Redis commands with the ack beyond the contract suite (docs/guides/effects.md "Redis
commands with the ack"): what a transaction refuses when staged (a Message built by hand,
a command a script may not run, a value it cannot send, a key off the source slot on a
cluster); the write script runs an entry's commands only with the ack that takes it out of
the pending list (a flush sent again, a second run), not for a stale owner in ordered mode,
and a command that fails there stops its entry's other commands, leaves the entry acked
and is logged."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, MessageQueue, StartFrom, Transaction
from streamq.consume.outputs import Command, Output, OutputWriter, Staging
from streamq.consume.staging import OutputSettings
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.wire.ownership import lease_key
from streamq.wire.slots import slot_of
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def _staging(stream: str, *, cluster: bool) -> Staging:
    settings = OutputSettings(None, stream, (stream,), lambda key: 0, lambda: cluster)  # type: ignore[arg-type]
    return Staging(settings, stream)


def _transaction(stream: str = "orders", *, cluster: bool = False) -> Transaction:
    return Transaction(_staging(stream, cluster=cluster), lambda commands: None)


def test_a_message_built_by_hand_refuses_a_transaction() -> None:
    msg = Message("1-0", "order", 1, {}, 1, "orders", "g")
    with pytest.raises(ConfigError, match="inside a handler of a consumer group"):
        msg.transaction()


@pytest.mark.parametrize(
    "args", [("EVAL", "return 1", "0"), ("blpop", "k", "0"), ("MULTI",), ("SUBSCRIBE", "c"),
             ("FLUSHALL",), ("WAIT", "1", "0")],
)  # fmt: skip
def test_commands_a_script_may_not_run_are_refused_when_staged(args: tuple[str, ...]) -> None:
    tx = _transaction()
    with pytest.raises(ConfigError, match=f"{args[0].upper()} cannot run in a transaction"):
        tx.call(*args, keys=[])


def test_values_and_keys_are_checked_when_staged() -> None:
    tx = _transaction()
    with pytest.raises(ConfigError, match="not dict"):
        tx.set("k", {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected an int"):
        tx.incrby("k", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not among the command's arguments"):
        tx.call("SET", "a", "1", keys=["b"])
    with pytest.raises(ConfigError, match="TTL must be positive"):
        tx.expire("k", 0)


async def test_a_closed_transaction_refuses_commands() -> None:
    staged: list[list[object]] = []
    tx = Transaction(_staging("orders", cluster=False), staged.append)
    async with tx:
        tx.set("a", 1)
    with pytest.raises(ConfigError, match="closed"):
        tx.set("b", 1)
    with pytest.raises(ConfigError, match="used once"):
        async with tx:
            pass
    assert len(staged) == 1 and len(staged[0]) == 1


def test_on_a_cluster_a_key_off_the_source_slot_is_refused_naming_the_slots() -> None:
    tx = _transaction("orders", cluster=True)
    other = next(f"k{n}" for n in range(100) if slot_of(f"k{n}") != slot_of("orders"))
    with pytest.raises(ConfigError) as raised:
        tx.hincrby(other, "f", 1)
    text = str(raised.value)
    assert repr(other) in text and str(slot_of(other)) in text and str(slot_of("orders")) in text
    tx.hincrby(tx.key("counts"), "f", 1)  # {orders}:counts: the source slot
    single = _transaction("orders", cluster=False)
    single.hincrby(other, "f", 1)  # one server: any key


def _command(*args: str) -> Command:
    return Command(list(args), [args[1]])


async def _pending_entry(client: aioredis.Redis, stream: str) -> str:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry_id: bytes = await client.xadd(stream, {"type": "order", "data": "1"})
    await client.xreadgroup("g", "c", {stream: ">"})
    return entry_id.decode()


async def test_a_write_sent_again_or_by_a_second_run_runs_the_commands_once(
    client: aioredis.Redis, stream: str
) -> None:
    entry_id = await _pending_entry(client, stream)
    writer = OutputWriter(client, stream, "g", cluster=lambda: False)
    staged = [(entry_id, [_command("INCRBY", f"{{{stream}}}:n", "5")])]
    assert await writer.write(staged, None)
    assert await writer.write(staged, None)  # a lost reply's flush, or another run's
    assert await client.get(f"{{{stream}}}:n") == b"5"
    assert (await client.xpending(stream, "g"))["pending"] == 0


async def test_a_stale_owners_commands_and_ack_are_refused(
    client: aioredis.Redis, stream: str
) -> None:
    entry_id = await _pending_entry(client, stream)
    lease = lease_key(stream, "g")
    await client.hset(
        lease, mapping={"consumer": "new-owner", "token": "8", "expires": "1" + "0" * 14}
    )
    writer = OutputWriter(client, stream, "g", cluster=lambda: False)
    staged = [(entry_id, [_command("INCRBY", f"{{{stream}}}:n", "5")])]
    assert not await writer.write(staged, (lease, "old-owner", "7"))
    assert await client.exists(f"{{{stream}}}:n") == 0
    assert (await client.xpending(stream, "g"))["pending"] == 1
    assert await writer.write(staged, (lease, "new-owner", "8"))
    assert await client.get(f"{{{stream}}}:n") == b"5"


async def test_a_failing_command_stops_its_entrys_commands_and_leaves_it_acked(
    client: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    first = (await client.xadd(stream, {"type": "order", "data": "1"})).decode()
    second = (await client.xadd(stream, {"type": "order", "data": "2"})).decode()
    await client.xreadgroup("g", "c", {stream: ">"})
    key = f"{{{stream}}}:"
    await client.set(key + "text", "not a hash")
    target = f"{{{stream}}}:out"
    writer = OutputWriter(client, stream, "g", cluster=lambda: False)
    staged: list[tuple[str, list[Output | Command]]] = [
        (first, [_command("SET", key + "a", "1"), _command("HINCRBY", key + "text", "f", "1"),
                 _command("SET", key + "b", "1"), Output(target, {"type": "t", "data": "1"})]),
        (second, [_command("SET", key + "c", "1")]),
    ]  # fmt: skip
    assert await writer.write(staged, None)
    assert await client.get(key + "a") == b"1", "the command before it: applied"
    assert await client.exists(key + "b") == 0, "the commands after it: not applied"
    assert await client.xlen(target) == 1, "the entry's outputs: written"
    assert await client.get(key + "c") == b"1", "the other entries: applied"
    assert (await client.xpending(stream, "g"))["pending"] == 0
    assert f"transaction of entry {first}" in caplog.text and "WRONGTYPE" in caplog.text
    assert "its command 2 (HINCRBY)" in caplog.text  # counted from 1
    await client.delete(target, *(key + name for name in ("a", "b", "c", "text")))


async def test_an_output_its_stream_refuses_is_reported_once_per_entry_beside_the_others(
    client: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An output to a key of another type (a string): the script goes on (an error would
    leave the entries acked before it without their outputs, silently); the entry's later
    outputs are not written, its commands and the other entries' outputs are, and the
    entry's failures come back as one reason."""
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    first = (await client.xadd(stream, {"type": "order", "data": "1"})).decode()
    second = (await client.xadd(stream, {"type": "order", "data": "2"})).decode()
    await client.xreadgroup("g", "c", {stream: ">"})
    text, out = f"{{{stream}}}:text", f"{{{stream}}}:out"
    await client.set(text, "not a stream")
    failed: list[tuple[str, str]] = []

    async def dead_letter(entry_id: str, reason: str) -> None:
        failed.append((entry_id, reason))

    writer = OutputWriter(client, stream, "g", cluster=lambda: False, failed=dead_letter)
    staged: list[tuple[str, list[Output | Command]]] = [
        (first, [Output(out, {"type": "t", "data": "1"}), Output(text, {"type": "t", "data": "2"}),
                 Output(out, {"type": "t", "data": "3"}), _command("SET", f"{{{stream}}}:a", "1")]),
        (second, [Output(out, {"type": "t", "data": "4"})]),
    ]  # fmt: skip
    assert await writer.write(staged, None)
    assert [f[b"data"] for _, f in await client.xrange(out)] == [b"1", b"4"]
    assert await client.get(f"{{{stream}}}:a") == b"1", "the entry's commands: applied"
    assert (await client.xpending(stream, "g"))["pending"] == 0
    ((entry_id, reason),) = failed
    assert entry_id == first and reason.startswith(
        f"its output 2 to {text!r} was refused: WRONGTYPE"
    )
    assert f"output of entry {first}" in caplog.text
    await client.delete(out, text, f"{{{stream}}}:a")


# -- a cluster --------------------------------------------------------------------------
@pytest.fixture
def cluster_source(streamq_cluster_url: str) -> Iterator[tuple[str, str]]:
    source = f"test-{os.urandom(5).hex()}"
    yield streamq_cluster_url, source
    for name in (source, f"{{{source}}}:counts"):
        delete_stream_keys(streamq_cluster_url, name)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_on_a_cluster_keys_of_the_source_slot_work_and_others_fail_the_handler(
    cluster_source: tuple[str, str],
) -> None:
    url, source = cluster_source
    other = next(f"k{n}" for n in range(100) if slot_of(f"k{n}") != slot_of(source))
    mq = MessageQueue(url, stream=source, group="g", consumer="c", config=TEST_TIMINGS,
                      start=StartFrom.EARLIEST)  # fmt: skip
    errors: list[ConfigError] = []

    @mq.handler("order")
    async def order(msg: Message[int]) -> None:
        async with msg.transaction() as tx:
            tx.hincrby(tx.key("counts"), str(msg.data), 1)
            try:
                tx.set(other, 1)
            except ConfigError as e:
                errors.append(e)

    async with mq.running():
        await mq.publish_many("order", [1, 2, 3])
        await wait_for(lambda: len(errors) == 3, what="three handlers refused the other key")

        async def counted() -> bool:
            return bool(await mq.client.hlen(f"{{{source}}}:counts") == 3)

        await wait_for(counted, what="the source slot's commands applied")
    assert f"slot {slot_of(other)}" in str(errors[0]) and f"slot {slot_of(source)}" in str(
        errors[0]
    )
