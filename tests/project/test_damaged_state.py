"""Damaged state in streamq's own keys: one suite of damaged or hostile records (partition
count, members, leases and failed entries' waits, stopped, halted, scheduled, periodic, flow control's records),
each written beside genuine messages of a partitioned topic and run against an ordered
consumer, a shared consumer (each with its mover and periodic runner), the CLI commands
and the dashboard pages.

Every genuine message is handled, nothing hangs (each check has a time limit), and the
parts that read the damaged record log it once at ERROR, naming its key."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest
import redis

from streamq import (
    ConfigError,
    Message,
    MessageQueue,
    Publisher,
    Reject,
    RetryPolicy,
    StartFrom,
    WrongTypeError,
)
from streamq.cli.main import main as cli_main
from streamq.publish.ticks import claim_key
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.topic.halted import halted_key, record_field
from streamq.topic.partitions import partition_for_key, partition_streams
from streamq.wire.keys import Keys
from streamq.wire.ownership import lease_key, members_key
from tests.helpers.clients import sync_client

PARTITIONS = 4
GENUINE = 1000  # published, plus SCHEDULED scheduled, beside each damaged record
SCHEDULED = 10
KEYS = 12
TICK = "tick"  # the periodic publisher's name; its ticks go to partition TICK_PARTITION
TICK_PARTITION = partition_for_key(TICK, PARTITIONS)
LIMIT = 20.0  # seconds any one check may take
DAMAGED_PARTITION = 1


@dataclass(frozen=True)
class Topic:
    name: str
    group: str = "g"

    @property
    def streams(self) -> tuple[str, ...]:
        return partition_streams(self.name, PARTITIONS)

    @property
    def damaged(self) -> str:
        """The partition stream the damaged records of one partition are written to."""
        return self.streams[DAMAGED_PARTITION]


Write = Callable[[redis.Redis, Topic], str]  # returns the damaged key


@dataclass(frozen=True)
class Damage:
    name: str
    write: Write
    logged_by: frozenset[str]  # which targets read the record and must log its key
    # a topic whose partition count is damaged, and the names beside it too, is read as
    # a plain stream: the CLI says that stream does not exist (exit 1), the page is a 404
    topic_unknown: bool = False
    # the consumer modes that handle every genuine message beside it: a key of another
    # type that a consumer must write (the scheduled messages; the partitions record, whose
    # queue refuses to open: its own test), or an ordered consumer's stopped record or
    # lease, which stops it (its own test; ERROR_HANDLING.md "Damaged state")
    consumed_by: frozenset[str] = frozenset({"ordered", "shared"})
    # written once the genuine topic is there (a publisher refuses to open beside it)
    late: bool = False

    def __str__(self) -> str:
        return self.name


def _now_ms() -> int:
    return int(time.time() * 1000)


def _hset(key_of: Callable[[Topic], str], field: str, value: str | Callable[[], str]) -> Write:
    def write(client: redis.Redis, topic: Topic) -> str:
        key = key_of(topic)
        client.hset(key, field, value() if callable(value) else value)
        return key

    return write


def _count_and_names(count: str, names: str) -> Write:
    """A partitions record with both fields damaged, written after the names a publisher
    records (which it never overwrites)."""

    def write(client: redis.Redis, topic: Topic) -> str:
        key = _partitions(topic)
        client.hset(key, mapping={"count": count, "names": names})
        return key

    return write


def _lease(**fields: str | Callable[[], str]) -> Write:
    def write(client: redis.Redis, topic: Topic) -> str:
        key = lease_key(topic.damaged, topic.group)
        values = {k: v() if callable(v) else v for k, v in fields.items()}
        client.hset(key, mapping=values)
        return key

    return write


def _scheduled(score: float) -> Write:
    def write(client: redis.Redis, topic: Topic) -> str:
        keys = Keys(topic.damaged)
        client.zadd(keys.scheduled, {"damaged-1": score})
        payload = json.dumps(["type", "job", "data", "{}", "key", "k0"])
        client.hset(keys.scheduled_payloads, "damaged-1", payload)
        return keys.scheduled

    return write


def _pre_claimed(value: str, ttl_ms: int | None) -> Write:
    """Claims of the periodic publisher's next ticks written ahead of time."""

    def write(client: redis.Redis, topic: Topic) -> str:
        stream = topic.streams[TICK_PARTITION]
        first = _now_ms() // 200 * 200
        for tick in range(first, first + 20_000, 200):
            client.set(claim_key(stream, TICK, tick), value, px=ttl_ms)
        return Keys(stream).periodic

    return write


CONSUMERS = frozenset({"ordered", "shared"})
ORDERED = frozenset({"ordered"})
SHARED = frozenset({"shared"})
LISTINGS = frozenset({"cli", "dashboard"})
NONE: frozenset[str] = frozenset()


def _partitions(t: Topic) -> str:
    return Keys(t.name).partitions


def _members(t: Topic) -> str:
    return members_key(t.name, t.group)


def _stopped(t: Topic) -> str:
    return Keys(t.damaged).stopped


def _halted(t: Topic) -> str:
    return halted_key(t.damaged)


def _periodic(t: Topic) -> str:
    return Keys(t.streams[TICK_PARTITION]).periodic


def _periodic_specs(t: Topic) -> str:
    return Keys(t.name).periodic  # the publishers' specs, on the topic's own slot


def _paused(t: Topic) -> str:
    return Keys(t.name).paused(t.group)  # on the topic's own slot, for every partition


def _waiting(t: Topic) -> str:
    return Keys(t.name).waiting(t.group)  # the running consumers' reports, on the topic's slot


def _set(key_of: Callable[[Topic], str], value: str) -> Write:
    def write(client: redis.Redis, topic: Topic) -> str:
        key = key_of(topic)
        client.set(key, value)
        return key

    return write


def _dead_letters(t: Topic) -> str:
    return Keys(t.damaged).dead_letters


def _outbox(t: Topic) -> str:
    return Keys(t.damaged).outbox


def _scheduled_key(t: Topic) -> str:
    return Keys(t.damaged).scheduled


def _scheduled_payloads(client: redis.Redis, topic: Topic) -> str:
    """A scheduled message whose payloads key is a string: the message cannot be read."""
    keys = Keys(topic.damaged)
    client.zadd(keys.scheduled, {"damaged-1": _now_ms() + 3_600_000})
    client.set(keys.scheduled_payloads, "oops")
    return keys.scheduled_payloads


def _listed(key_of: Callable[[Topic], str]) -> Write:
    def write(client: redis.Redis, topic: Topic) -> str:
        key = key_of(topic)
        client.rpush(key, "oops")
        return key

    return write


def _throttled_type(t: Topic) -> str:
    return Keys(t.name).throttle(t.group, "job")


def _rate_of_type(t: Topic) -> str:
    return Keys(t.name).rate(t.group, "job")


DAMAGES = [
    Damage("partition count past the maximum", _hset(_partitions, "count", "20000"),
           CONSUMERS | LISTINGS),
    Damage("partition count not a number", _hset(_partitions, "count", "abc"),
           CONSUMERS | LISTINGS),
    Damage("partition count and names damaged", _count_and_names("4096", '["x"]'),
           CONSUMERS | LISTINGS, topic_unknown=True),
    Damage("stopped field not an entry ID", _hset(_stopped, "not-an-id", '{"g": 1}'), LISTINGS),
    Damage("stopped record not JSON", _hset(_stopped, "1-1", "{not json"), NONE),
    Damage("halted record not JSON", _hset(_halted, record_field("g", "k1"), "{not json"),
           LISTINGS),
    Damage("halted field not JSON", _hset(_halted, "[not json", '{"id": "1-1"}'), LISTINGS),
    Damage("lease expiry not a number", _lease(consumer="ghost", expires="abc", token="3"),
           ORDERED),
    Damage("lease token not a number",
           _lease(consumer="ghost", expires=lambda: str(_now_ms() - 1), token="abc"), ORDERED),
    Damage("lease held by a ghost far ahead",
           _lease(consumer="ghost", expires=lambda: str(_now_ms() + 10**14), token="7"),
           ORDERED),
    Damage("wait of a failed entry not a time", _lease(**{"due:1-1": "soon"}), ORDERED),
    Damage("wait of a failed entry far ahead", _lease(**{"due:1-1": str(10**20)}), ORDERED),
    Damage("phantom member far ahead", _hset(_members, "aaa-ghost", "99999999999999999999|0"),
           CONSUMERS),
    Damage("member holding a partition that is no number",
           _hset(_members, "zzz", lambda: f"{_now_ms() + 60_000}|\u00b2"), ORDERED),
    Damage("member value without an expiry", _hset(_members, "x", "abc|0"), CONSUMERS),
    Damage("scheduled due at +inf", _scheduled(float("inf")), CONSUMERS | LISTINGS),
    Damage("scheduled due at -inf", _scheduled(float("-inf")), CONSUMERS),
    Damage("scheduled due at 1e300", _scheduled(1e300), CONSUMERS | LISTINGS),
    Damage("periodic last tick far ahead", _hset(_periodic, TICK, str(10**20)), CONSUMERS),
    Damage("periodic ticks pre-claimed by a ghost",
           _pre_claimed(f"lease {10**14} ghost", None), CONSUMERS),
    Damage("periodic ticks pre-claimed as done", _pre_claimed("done 1-1", None), CONSUMERS),
    # flow control: what a listing reads (topic_info's paused groups) logs the damage; a
    # consumer obeys none of these (it would pause or hold back genuine messages)
    Damage("pause field not a message type", _hset(_paused, "not a type!", "1"), LISTINGS),
    Damage("pause time not a number", _hset(_paused, "job", "yesterday"), LISTINGS),
    Damage("pause record not a hash", _set(_paused, "paused"), LISTINGS),
    Damage("throttle without expiry", _set(_throttled_type, "forever"), NONE),
    Damage("rate limiter state not a time", _set(_rate_of_type, "soon"), NONE),
    # the consumers' waiting reports: what a listing reads (topic_info's waiting groups)
    # logs the damage and leaves it out; a consumer with nothing held back never reads it
    Damage("waiting report not JSON", _hset(_waiting, "ghost", "lots"), LISTINGS),
    Damage("waiting report not a hash", _set(_waiting, "waiting"), LISTINGS),
    # keys of another type than streamq's (WRONGTYPE to every command streamq sends them):
    # what a listing reads is set aside, named; the rest of the topic is shown
    Damage("stopped record not a hash", _set(_stopped, "oops"), LISTINGS, consumed_by=SHARED),
    Damage("dead-letter stream not a stream", _set(_dead_letters, "oops"), LISTINGS),
    Damage("outbox not a stream", _set(_outbox, "oops"), LISTINGS),
    Damage("halted record not a hash", _listed(_halted), LISTINGS),
    Damage("scheduled record not a sorted set", _set(_scheduled_key, "oops"), LISTINGS,
           consumed_by=NONE),
    Damage("scheduled payloads not a hash", _scheduled_payloads, LISTINGS, consumed_by=NONE),
    Damage("periodic record not a hash", _set(_periodic_specs, "oops"), LISTINGS),
    Damage("lease not a hash", _set(lambda t: lease_key(t.damaged, t.group), "oops"), LISTINGS,
           consumed_by=SHARED),
    Damage("partitions record not a hash", _set(_partitions, "oops"), LISTINGS,
           topic_unknown=True, consumed_by=NONE, late=True),
]  # fmt: skip


@pytest.fixture
def topic(redis_url: str, stream: str) -> Iterator[Topic]:
    yield Topic(stream)
    for name in (*partition_streams(stream, PARTITIONS), stream):
        delete_stream_keys(redis_url, name)


@pytest.fixture
def damaged(redis_url: str, topic: Topic, request: pytest.FixtureRequest, on_cluster: bool) -> str:
    """The damaged record of the test's case, written before anything runs: its key.
    (One node: every key of the topic is reached through one client.)"""
    if on_cluster:
        pytest.skip("the damaged records are written through one node's client; the cluster "
                    "has its own case (test_an_ordered_consumer_on_a_cluster_...)")  # fmt: skip
    damage: Damage = request.param
    if damage.late:
        _genuine_topic(redis_url, topic)
    with sync_client(redis_url, topic.damaged) as client:
        return damage.write(client, topic)


def _logged(caplog: pytest.LogCaptureFixture, key: str) -> bool:
    """Whether an ERROR record names ``key`` (or a key under it: each pre-claimed tick is
    a key of its own), none twice (a damaged record is logged once, not at every turn of
    the loop that reads it)."""
    named = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and key in r.getMessage()
    ]
    assert len(named) == len(set(named)), named
    return bool(named)


def _queue(redis_url: str, topic: Topic, *, ordered: bool) -> MessageQueue:
    return MessageQueue(
        redis_url, stream=topic.name, group=topic.group, consumer=f"c-{os.urandom(3).hex()}",
        partitions=PARTITIONS, ordered=ordered, ownership_lease=2.0,
        start=StartFrom.EARLIEST, config=TEST_TIMINGS,
    )  # fmt: skip


async def _publish_genuine(mq: MessageQueue) -> set[str]:
    ids = set(
        await mq.publish_many(
            "job", [{"n": n} for n in range(GENUINE)], key=lambda d: f"k{d['n'] % KEYS}"
        )
    )
    for n in range(SCHEDULED):
        await mq.publish("job", {"n": -n}, key=f"k{n}", delay=0.2)
    return ids


async def _consume_beside(
    redis_url: str, topic: Topic, caplog: pytest.LogCaptureFixture, *, ordered: bool
) -> tuple[list[Message[dict[str, int]]], int]:
    """Genuine messages published beside the damaged record; run a consumer with a
    periodic publisher until every one is handled (within :data:`LIMIT`): what it handled
    and how many ticks it published."""
    mq = _queue(redis_url, topic, ordered=ordered)
    handled: list[Message[dict[str, int]]] = []
    ticks: list[Message[int]] = []

    @mq.handler("job")
    async def job(msg: Message[dict[str, int]]) -> None:
        handled.append(msg)

    @mq.handler(TICK)
    async def tick(msg: Message[int]) -> None:
        ticks.append(msg)

    mq.periodic(TICK, every=0.2)(lambda: 1)
    caplog.set_level(logging.ERROR)
    async with mq:
        await _publish_genuine(mq)
        async with mq.running():
            with anyio.fail_after(LIMIT):
                while len({m.id for m in handled}) < GENUINE + SCHEDULED or len(ticks) < 2:
                    assert mq.stop_reason is None, f"the consumer stopped: {mq.stop_reason}"
                    await anyio.sleep(0.05)
    return handled, len(ticks)


@pytest.mark.anyio
@pytest.mark.parametrize("damaged", DAMAGES, indirect=True, ids=str)
@pytest.mark.parametrize("mode", ["ordered", "shared"])
async def test_a_consumer_handles_every_genuine_message_beside_a_damaged_record(
    redis_url: str, topic: Topic, damaged: str, mode: str, request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    damage = request.node.callspec.params["damaged"]
    if mode not in damage.consumed_by:
        pytest.skip(f"no consumer in {mode} mode runs beside this damage (ERROR_HANDLING.md)")
    handled, ticks = await _consume_beside(redis_url, topic, caplog, ordered=mode == "ordered")
    assert len({m.id for m in handled}) == GENUINE + SCHEDULED
    assert ticks >= 2
    if mode in damage.logged_by:
        assert _logged(caplog, damaged), f"no ERROR naming {damaged}"


def _genuine_topic(redis_url: str, topic: Topic) -> None:
    """Genuine messages in every partition, and the group, for the listings to show."""
    with Publisher(redis_url, topic.name, partitions=PARTITIONS) as publisher:
        publisher.publish_many("job", [{"n": n} for n in range(20)], key=lambda d: str(d["n"]))
    for stream in topic.streams:  # each partition on its own node's client (a cluster)
        with sync_client(redis_url, stream) as client:
            client.xgroup_create(stream, topic.group, "0")


def _cli(*args: str) -> tuple[int, str]:
    """``streamq ARGS`` in this process (a thread of its own, under :data:`LIMIT`)."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cli_main(list(args))), daemon=True)
    thread.start()
    thread.join(LIMIT)
    assert result, f"streamq {' '.join(args)} hung"
    return result[0], " ".join(args)


@pytest.mark.parametrize("damaged", DAMAGES, indirect=True, ids=str)
def test_the_cli_lists_a_topic_beside_a_damaged_record(
    redis_url: str, topic: Topic, damaged: str, request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    damage = request.node.callspec.params["damaged"]
    if not damage.late:
        _genuine_topic(redis_url, topic)
    caplog.set_level(logging.ERROR)
    url = ["--url", redis_url]
    for args in (
        ["info", topic.name], ["scheduled", "list", topic.name],
        ["scheduled", "periodic", topic.name], ["halted", "list", topic.name, topic.group],
    ):  # fmt: skip
        code, command = _cli(*args, *url)
        out = capsys.readouterr()
        assert "Traceback" not in out.err
        if damage.topic_unknown and code == 1:
            assert "does not exist" in out.err
        else:
            assert code == 0, f"streamq {command}: exit {code}: {out.err}"
    if "cli" in damage.logged_by:
        assert _logged(caplog, damaged), f"no ERROR naming {damaged}"


# streamq's keys of a topic that topic_info() reads, and how it shows one of another type
WRONG_TYPE_FIGURES = {
    "dead_letters": lambda info: info.dead_letters == 0,
    "outbox": lambda info: info.outbox == 0,
    "stopped": lambda info: info.stopped_ids == [],
    "scheduled": lambda info: info.scheduled == 0 and info.next_due is None,
}


@pytest.mark.anyio
@pytest.mark.parametrize("record", sorted(WRONG_TYPE_FIGURES))
async def test_topic_info_sets_a_key_of_another_type_aside_and_names_it(
    redis_url: str, stream: str, record: str, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``topic_info()`` (and ``streamq info``) of a plain topic one of whose keys holds a
    string: the other figures as they are, that one left out and named in ``damaged``
    with the type it holds, logged once at ERROR."""
    mq = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST)
    key = getattr(Keys(stream), record)
    caplog.set_level(logging.ERROR)
    try:
        async with mq:
            await mq.publish("job", {"n": 1})
            with sync_client(redis_url, stream) as client:
                client.set(key, "oops")
            with anyio.fail_after(LIMIT):
                info = await mq.topic_info()
                again = await mq.topic_info()
        assert info.length == 1 and [g.name for g in info.groups] == ["g"]
        assert WRONG_TYPE_FIGURES[record](info), info
        (named,) = info.damaged
        assert key in named and "expected a" in named and "found a string" in named, named
        assert again.damaged == info.damaged  # named every time, logged once
        assert _logged(caplog, key)
        code = await anyio.to_thread.run_sync(lambda: _cli("info", stream, "--url", redis_url))
        out = capsys.readouterr()
        assert code[0] == 0, out.err
        assert f"damaged       {named}: set aside" in out.out
    finally:
        delete_stream_keys(redis_url, stream)


# the stream's gauges that read one of streamq's keys (the rest read the stream itself)
WRONG_TYPE_GAUGES = {
    "dead_letters": "streamq_dead_letters",
    "scheduled": "streamq_scheduled_messages",
}


@pytest.mark.parametrize("record", sorted(WRONG_TYPE_GAUGES))
def test_the_metrics_leave_out_only_the_gauge_of_a_key_of_another_type(
    redis_url: str, stream: str, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A scrape beside one of a stream's keys holding a string: that key's gauge is left
    out (logged once, named, counted as a damaged record); every other gauge of the stream
    is there, as are the other streams'."""
    pytest.importorskip("prometheus_client", reason="the metrics need the [metrics] extra")
    from streamq.metrics import QueueCollector

    key = getattr(Keys(stream), record)
    with sync_client(redis_url, stream) as client:
        client.xadd(stream, {"type": "job", "data": "1"})
        client.xgroup_create(stream, "g", id="0")
        client.set(key, "oops")
    collector = QueueCollector(MessageQueue(redis_url, stream=stream, group="g"))
    caplog.set_level(logging.ERROR)
    try:
        for _ in range(2):
            gauges = {
                f.name: {s.labels.get("group", ""): s.value for s in f.samples
                         if s.labels.get("stream") == stream}
                for f in collector.collect()
            }  # fmt: skip
        assert gauges["streamq_stream_length"] == {"": 1}
        assert gauges["streamq_group_lag"] == {"g": 1}
        assert gauges["streamq_group_pending"] == {"g": 0}
        assert gauges[WRONG_TYPE_GAUGES[record]] == {}
        assert all(gauges[name] == {"": 0} for name in WRONG_TYPE_GAUGES.values()
                   if name != WRONG_TYPE_GAUGES[record])  # fmt: skip
        assert _logged(caplog, key)  # once, not at every scrape
    finally:
        collector.close()
        delete_stream_keys(redis_url, stream)


@pytest.mark.anyio
@pytest.mark.parametrize("partitions", [1, PARTITIONS])
async def test_a_queue_refuses_to_open_beside_a_partitions_record_of_another_type(
    redis_url: str, stream: str, partitions: int
) -> None:
    """The partition count cannot be checked nor recorded: ``ConfigError`` naming the key
    and the type it holds, not a bare WRONGTYPE; a Publisher the same."""
    key = Keys(stream).partitions
    with sync_client(redis_url, stream) as client:
        client.set(key, "oops")
    try:
        mq = MessageQueue(redis_url, stream=stream, group="g", partitions=partitions)
        with pytest.raises(ConfigError) as refused:
            async with mq:
                pass
        assert key in str(refused.value) and "found a string" in str(refused.value)
        with (
            pytest.raises(ConfigError, match="found a string"),
            Publisher(redis_url, stream, partitions=partitions) as publisher,
        ):
            publisher.publish("job", {"n": 1})
    finally:
        delete_stream_keys(redis_url, stream)


def test_streamq_info_names_a_partitions_record_of_another_type_beside_a_plain_stream(
    redis_url: str, stream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI reads the topic as a plain stream and says why in its ``damaged`` line."""
    with Publisher(redis_url, stream) as publisher:
        publisher.publish("job", {"n": 1})
    key = Keys(stream).partitions
    try:
        with sync_client(redis_url, stream) as client:
            client.set(key, "oops")
        code, _ = _cli("info", stream, "--url", redis_url)
        out = capsys.readouterr()
        assert code == 0, out.err
        assert f"damaged       damaged partitions record in '{key}'" in out.out, out.out
        assert "found a string: set aside" in out.out
    finally:
        delete_stream_keys(redis_url, stream)


@pytest.mark.anyio
async def test_a_stopped_record_of_another_type_is_named_and_the_control_channel_stays(
    redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A shared consumer beside a stopped record that is a string: it handles on, its
    control channel is not taken for lost, the key is named at ERROR once, and stop /
    resume refuse with an error naming the key."""
    mq = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST,
                      config=TEST_TIMINGS)  # fmt: skip
    key = Keys(stream).stopped
    handled: list[str] = []
    mq.handler("job")(lambda msg: handled.append(msg.id))
    caplog.set_level(logging.INFO)
    try:
        async with mq:
            with sync_client(redis_url, stream) as client:
                client.set(key, "oops")
            async with mq.running():
                first = await mq.publish("job", {"n": 1})
                with anyio.fail_after(LIMIT):
                    while first not in handled or not _logged(caplog, key):
                        await anyio.sleep(0.05)
                for operation in (mq.stop_message, mq.resume_message):
                    with pytest.raises(WrongTypeError, match=re.escape(key)):
                        await operation(first)
        said = [r.getMessage() for r in caplog.records]
        assert not [m for m in said if "control channel lost" in m], said
    finally:
        delete_stream_keys(redis_url, stream)


@pytest.mark.anyio
@pytest.mark.parametrize("record", ["scheduled", "scheduled_payloads", "dead_letters"])
async def test_the_mover_names_a_key_of_another_type_it_cannot_move_through(
    redis_url: str, stream: str, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer's mover whose scheduled messages (or their payloads, or the dead-letter
    stream the damaged ones go to) are in a key of another type: the key named at ERROR
    once, the consumer handling on."""
    mq = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST,
                      config=TEST_TIMINGS)  # fmt: skip
    keys = Keys(stream)
    key = getattr(keys, record)
    handled: list[str] = []
    mq.handler("job")(lambda msg: handled.append(msg.id))
    caplog.set_level(logging.INFO)
    try:
        async with mq:
            await mq.publish("job", {"n": 0}, delay=0.1)  # due: the mover must read it
            with sync_client(redis_url, stream) as client:
                if record == "dead_letters":  # the damaged payload goes to the letters
                    client.hset(keys.scheduled_payloads, mapping={
                        f: "not a payload" for f in client.hkeys(keys.scheduled_payloads)
                    })  # fmt: skip
                client.set(key, "oops")
            async with mq.running():
                first = await mq.publish("job", {"n": 1})
                with anyio.fail_after(LIMIT):
                    while first not in handled or not _logged(caplog, key):
                        await anyio.sleep(0.05)
    finally:
        delete_stream_keys(redis_url, stream)


@pytest.mark.anyio
@pytest.mark.parametrize("record", ["stopped", "lease"])
async def test_an_ordered_consumer_stops_naming_a_stopped_record_or_lease_of_another_type(
    redis_url: str, topic: Topic, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every read, claim and ack of an ordered consumer checks its lease and the stopped
    record: of another type, it cannot go on with that partition. It stops as on any error
    that will not go away (``stop_reason`` "error", ``run()`` raises), naming the key."""
    key = Keys(topic.damaged).stopped if record == "stopped" else lease_key(topic.damaged, "g")
    with sync_client(redis_url, topic.damaged) as client:
        client.set(key, "oops")
    mq = _queue(redis_url, topic, ordered=True)
    mq.handler("job")(lambda msg: None)
    caplog.set_level(logging.ERROR)
    async with mq:
        await mq.publish_many("job", [{"n": n} for n in range(40)], key=lambda d: f"k{d['n']}")
        with anyio.fail_after(LIMIT), pytest.raises(WrongTypeError, match=re.escape(key)):
            await mq.run()
    assert mq.stop_reason == "error"
    assert _logged(caplog, key)


@pytest.mark.anyio
async def test_a_dead_letter_write_refused_by_a_key_of_another_type_is_not_counted_as_written(
    redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A rejected entry whose dead-letter stream is a string: not logged nor counted as
    dead-lettered, left pending, the key named at ERROR; the entries after it handled."""
    mq = MessageQueue(redis_url, stream=stream, group="g", start=StartFrom.EARLIEST,
                      config=TEST_TIMINGS)  # fmt: skip
    key = Keys(stream).dead_letters
    handled: list[str] = []

    @mq.handler("bad")
    async def bad(msg: Message[dict[str, int]]) -> None:
        raise Reject("no")

    @mq.handler("ok")
    async def ok(msg: Message[dict[str, int]]) -> None:
        handled.append(msg.id)

    caplog.set_level(logging.INFO)
    try:
        async with mq:
            with sync_client(redis_url, stream) as client:
                client.set(key, "oops")
            rejected = await mq.publish("bad", {})
            for n in range(5):
                await mq.publish("ok", {"n": n})
            async with mq.running():
                with anyio.fail_after(LIMIT):
                    while len(handled) < 5 or not _logged(caplog, key):
                        await anyio.sleep(0.05)
                stats = mq.stats()
            with sync_client(redis_url, stream) as client:
                pending = client.xpending(stream, "g")
        assert stats["dead_lettered"] == 0, stats
        said = [r.getMessage() for r in caplog.records]
        assert not [m for m in said if m.startswith(f"dead-lettered {rejected}")], said
        assert pending["pending"] == 1 and pending["min"].decode() == rejected
    finally:
        delete_stream_keys(redis_url, stream)


@pytest.fixture(scope="module")
def web(redis_url: str) -> Iterator[httpx.Client]:
    """One dashboard over the session's server for every case (pages under LIMIT)."""
    pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")
    from tests.helpers.dashboard import dashboard_client

    with dashboard_client(redis_url) as client:
        client.timeout = httpx.Timeout(LIMIT)
        yield client


@pytest.mark.parametrize("damaged", DAMAGES, indirect=True, ids=str)
def test_every_dashboard_page_shows_beside_a_damaged_record(
    redis_url: str, topic: Topic, damaged: str, request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture, web: httpx.Client,
) -> None:  # fmt: skip
    damage = request.node.callspec.params["damaged"]
    if not damage.late:
        _genuine_topic(redis_url, topic)
    caplog.set_level(logging.ERROR)
    pages = ["/topic", "/topic/stopped", "/topic/scheduled", "/topic/halted", "/topic/pending"]
    assert web.get("/").status_code == 200
    for page in pages:
        for stream in (topic.name, topic.damaged):
            params = {"stream": stream, "group": topic.group}
            shown = web.get(page, params=params)
            unknown = damage.topic_unknown and stream == topic.name  # read as a plain stream
            expected = 404 if unknown and shown.status_code == 404 else 200
            assert shown.status_code == expected, f"{page}?stream={stream}: {shown.status_code}"
    if "dashboard" in damage.logged_by:
        assert _logged(caplog, damaged), f"no ERROR naming {damaged}"


@pytest.mark.anyio
async def test_a_garbage_halted_record_before_its_key_halts_is_replaced_and_the_key_halts(
    redis_url: str, topic: Topic, caplog: pytest.LogCaptureFixture
) -> None:
    """The key halts on its poison entry once (its partition is not given up and retaken),
    every other key goes on, and the garbage is logged once."""
    poison_key = "k1"
    stream = topic.streams[partition_for_key(poison_key, PARTITIONS)]
    field = record_field(topic.group, poison_key)
    with sync_client(redis_url, stream) as client:
        client.hset(halted_key(stream), field, "{not json")
    mq = MessageQueue(
        redis_url, stream=topic.name, group=topic.group, consumer="c1", partitions=PARTITIONS,
        ordered=True, ownership_lease=2.0, on_poison="halt", start=StartFrom.EARLIEST,
        retry=RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1),
        config=TEST_TIMINGS,
    )  # fmt: skip
    handled: list[str] = []

    @mq.handler("job")
    async def job(msg: Message[dict[str, int]]) -> None:
        if msg.key == poison_key:
            raise ValueError("poison")
        handled.append(msg.id)

    caplog.set_level(logging.INFO)
    healthy = sum(1 for n in range(GENUINE) if f"k{n % KEYS}" != poison_key)
    async with mq:
        await mq.publish_many(
            "job", [{"n": n} for n in range(GENUINE)], key=lambda d: f"k{d['n'] % KEYS}"
        )
        async with mq.running():
            with anyio.fail_after(LIMIT):
                while len(handled) < healthy or not await mq.halted_keys():
                    await anyio.sleep(0.05)
            (halted,) = await mq.halted_keys()
            await anyio.sleep(1.0)  # a partition given up would be retaken meanwhile
            acquired = [r for r in caplog.records if "acquired by" in r.getMessage()]
            assert _logged(caplog, halted_key(stream))
            # overwritten while it halts: the owner writes it anew, so it can be released
            with sync_client(redis_url, stream) as client:
                client.hset(halted_key(stream), field, "[]")
            with anyio.fail_after(LIMIT):
                while not await mq.halted_keys():
                    await anyio.sleep(0.05)
            assert await mq.release_halted_key(poison_key, skip=True)
            with anyio.fail_after(LIMIT):  # skipped: the key goes on, to its next poison
                while [h.entry_id for h in await mq.halted_keys()] in ([], [halted.entry_id]):
                    await anyio.sleep(0.05)
    assert halted.key == poison_key
    assert len(acquired) == PARTITIONS  # each partition taken once, never given up


@pytest.mark.anyio
async def test_a_partition_worker_failing_stops_its_ordered_consumer_with_reason_error(
    redis_url: str, topic: Topic, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure inside a partition worker (raised from its task group as an ExceptionGroup)
    is never a silent stop: the consumer stops with stop_reason 'error' and says so."""

    async def broken(*args: object) -> None:
        raise ValueError("a bug in a partition's task")

    monkeypatch.setattr("streamq.consume.halting.HaltedKeys.watch", broken)
    mq = _queue(redis_url, topic, ordered=True)
    mq.handler("job")(lambda msg: None)
    caplog.set_level(logging.ERROR)
    async with mq:
        with anyio.fail_after(LIMIT), pytest.raises(ValueError):
            await mq.run()
    assert mq.done.is_set()
    assert mq.stop_reason == "error"
    assert any("died" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


def test_damaged_records_are_counted_once_each_in_the_metrics(redis_url: str, topic: Topic) -> None:
    """``streamq_damaged_records{kind}`` counts each damaged record once, however often it
    is read."""
    pytest.importorskip("prometheus_client", reason="the metrics need the [metrics] extra")
    from streamq.metrics import QueueCollector

    def count() -> float:
        (family,) = [f for f in QueueCollector().collect() if f.name == "streamq_damaged_records"]
        return float(sum(s.value for s in family.samples if s.labels == {"kind": "stopped"}))

    _genuine_topic(redis_url, topic)
    before = count()
    with sync_client(redis_url, topic.damaged) as client:
        client.hset(Keys(topic.damaged).stopped, "not-an-id", "{}")
    for _ in range(3):
        code, command = _cli("info", topic.damaged, "--url", redis_url)
        assert code == 0, command
    assert count() == before + 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_ordered_consumer_on_a_cluster_handles_every_genuine_message_beside_damage(
    streamq_cluster_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On a Redis Cluster, where the topic's records and each partition's live on their
    own slots: damaged members, leases, stopped and scheduled records on several slots."""
    topic = Topic(f"test-{os.urandom(5).hex()}")
    try:
        with sync_client(streamq_cluster_url, topic.name) as client:
            client.hset(_members(topic), "aaa-ghost", "99999999999999999999|0")
        for index, stream in enumerate(topic.streams):
            with sync_client(streamq_cluster_url, stream) as client:
                lease = {"consumer": "ghost", "expires": str(_now_ms() + 10**14), "token": "abc"}
                client.hset(lease_key(stream, topic.group), mapping=lease)
                client.hset(Keys(stream).stopped, f"not-an-id-{index}", '{"g": 1}')
                client.zadd(Keys(stream).scheduled, {"damaged": float("inf")})
        handled, ticks = await _consume_beside(streamq_cluster_url, topic, caplog, ordered=True)
        assert len({m.id for m in handled}) == GENUINE + SCHEDULED
        assert ticks >= 2
        assert _logged(caplog, _members(topic))
        assert all(_logged(caplog, lease_key(s, topic.group)) for s in topic.streams)
    finally:
        for name in (*topic.streams, topic.name):
            delete_stream_keys(streamq_cluster_url, name)
