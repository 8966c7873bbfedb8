"""The Redis boundary: every redis-py error leaves it as streamq's, typed by what the reply
says (matched in one place, wire/client.py), against the real server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis import exceptions as rx

from streamq import (
    ConfigError,
    GroupExistsError,
    GroupNotFoundError,
    MessageQueue,
    Publisher,
    ServerUnavailableError,
    StreamNotFoundError,
    UnknownCommandError,
    WrongTypeError,
)
from streamq.topic.admin import ensure_group, seek
from streamq.topic.cleanup import has_xdelex
from streamq.wire import replies, resp
from streamq.wire.client import connect, connect_sync
from streamq.wire.translate import translated
from tests.helpers.queues import QueueFactory

pytestmark = pytest.mark.anyio


async def test_replies_become_typed_errors(client: aioredis.Redis, stream: str) -> None:
    """streamq's clients translate by themselves: no translated() around the calls."""
    with pytest.raises(StreamNotFoundError, match=repr(stream)) as caught:
        await client.execute_command("XGROUP", "SETID", stream, "g", "0")  # no key yet
    assert isinstance(caught.value.__cause__, rx.ResponseError)  # the reply, kept
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    with pytest.raises(GroupExistsError, match="consumer group 'g'"):
        await client.xgroup_create(stream, "g", id="0", mkstream=True)
    with pytest.raises(GroupNotFoundError, match="consumer group 'h'"):
        await client.xgroup_setid(stream, "h", "0")
    with pytest.raises(GroupNotFoundError, match="consumer group 'nobody'"):
        await client.xreadgroup("nobody", "c", {stream: ">"})
    missing = f"{{{stream}}}-x"  # in the stream's slot: its client serves it on a cluster
    with pytest.raises(StreamNotFoundError):
        await client.xinfo_groups(missing)


async def test_a_pipeline_raises_the_first_error_reply_translated(
    client: aioredis.Redis, stream: str
) -> None:
    """redis-py prefixes a pipeline's error with "Command # 2 (...)": matched on that text,
    BUSYGROUP read as a bare RedisFailure."""
    pipe = client.pipeline(transaction=False)
    pipe.xgroup_create(stream, "g", id="0", mkstream=True)
    pipe.xgroup_create(stream, "g", id="0", mkstream=True)
    with pytest.raises(GroupExistsError, match="consumer group 'g'"):
        await pipe.execute()
    pipe = client.pipeline(transaction=False)
    pipe.xlen(stream)
    pipe.xgroup_create(stream, "g", id="0")
    length, refused = await pipe.execute(raise_on_error=False)  # error replies in place
    assert length == 0 and isinstance(refused, rx.ResponseError)


async def test_a_hand_packed_command_raises_the_translated_error(
    client: aioredis.Redis, stream: str
) -> None:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    command = resp.pack_xreadgroup("nobody", "c", stream, ">", 10, None)
    with pytest.raises(GroupNotFoundError, match=repr(stream)):
        await resp.execute(client, command, 1)
    own = resp.OwnConnection(client)
    try:
        with pytest.raises(GroupNotFoundError):
            await own.execute(command, 1)
        (reply,) = await own.execute(command, 1, raise_errors=False)
        assert isinstance(reply, rx.ResponseError)
    finally:
        await own.release()


def test_a_blocking_client_translates_too(redis_url: str, stream: str) -> None:
    with connect_sync(redis_url).client_for(stream, owner=True) as client:
        client.xgroup_create(stream, "g", id="0", mkstream=True)
        with pytest.raises(GroupExistsError, match="consumer group 'g'"):
            client.xgroup_create(stream, "g", id="0", mkstream=True)
        with pytest.raises(GroupNotFoundError):
            resp.execute_sync(client, resp.pack_xreadgroup("x", "c", stream, ">", 1, None), 1)
        client.delete(stream)


async def test_a_script_the_server_forgot_is_loaded_again(
    client: aioredis.Redis, stream: str
) -> None:
    """redis-py's Script loads a script when told NOSCRIPT: that one reply passes
    untranslated (else every script failed after SCRIPT FLUSH or a failover)."""
    script = client.register_script("return redis.call('XLEN', KEYS[1])")
    assert await script(keys=[stream]) == 0
    await client.script_flush()
    assert await script(keys=[stream]) == 0


async def test_an_unknown_command_is_typed(client: aioredis.Redis, stream: str) -> None:
    with pytest.raises(UnknownCommandError), translated(stream):
        await client.execute_command("NO-SUCH-COMMAND", stream)
    # the cleanup probe relies on it: it answers, whatever the server is
    assert isinstance(await has_xdelex(client, stream), bool)


async def test_a_key_of_another_type_is_typed(client: aioredis.Redis, stream: str) -> None:
    """WRONGTYPE: what the readers of streamq's own keys set aside (streamq.wire.wrong_type)."""
    await client.set(stream, "oops")
    try:
        with pytest.raises(WrongTypeError, match=stream):
            await client.xlen(stream)
    finally:
        await client.delete(stream)


async def test_ensure_group_tells_an_existing_group(client: aioredis.Redis, stream: str) -> None:
    assert await ensure_group(client, stream, "g", "0") is True
    assert await ensure_group(client, stream, "g", "0") is False


async def test_seek_on_a_deleted_stream_says_the_group_is_missing(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """Was a bare RedisFailure ("The XGROUP subcommand requires the key to exist")."""
    mq = make_queue()
    async with mq:
        await client.delete(mq.stream)
        with pytest.raises(GroupNotFoundError, match="cannot seek"):
            await seek(client, mq.stream, "g", "0")


def test_an_error_translated_twice_keeps_its_first_translation() -> None:
    """Nested boundaries (a helper that translates, called under another translated())
    pass streamq's error on as it is: it was re-wrapped as "cannot reach the server:
    server not ready: ..." before."""
    outer, inner = translated("s", "g"), translated("s", "g")
    with pytest.raises(ServerUnavailableError) as caught, outer, inner:
        raise rx.ResponseError("LOADING Redis is loading the dataset in memory")
    assert isinstance(caught.value.__cause__, rx.ResponseError)
    assert str(caught.value) == "server not ready: LOADING Redis is loading the dataset in memory"


@pytest.mark.parametrize(
    "error", [rx.ConnectionError("reset"), rx.TimeoutError("slow"), ConnectionResetError("rst")]
)
def test_connection_failures_are_server_unavailable(error: Exception) -> None:
    with pytest.raises(ServerUnavailableError, match="cannot reach the server"), translated("s"):
        raise error


# -- reply shapes: wire/replies.py, both protocols, as sent and parsed by redis-py -------
@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
async def speaking(
    request: pytest.FixtureRequest, redis_url: str, stream: str
) -> AsyncIterator[aioredis.Redis]:
    """A client of the test stream's keys speaking RESP2 or RESP3."""
    sep = "&" if "?" in redis_url else "?"
    deployment = connect(f"{redis_url}{sep}protocol={request.param}")
    yield deployment.client_for(stream)
    await deployment.aclose()


async def test_entries_read_as_sent_and_parsed(speaking: aioredis.Redis, stream: str) -> None:
    client = speaking
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    first = await client.xadd(stream, {"type": "a", "data": "1"})
    second = await client.xadd(stream, {"type": "b", "data": "2", "meta": "{}"})
    command = resp.pack_xreadgroup("g", "c", stream, ">", 10, None)
    (reply,) = await resp.execute(client, command, 1)
    got = replies.entries(replies.read_rows(reply))
    assert [(e.id, e.fields) for e in got] == [
        (first.decode(), {b"type": b"a", b"data": b"1"}),
        (second.decode(), {b"type": b"b", b"data": b"2", b"meta": b"{}"}),
    ]
    (empty,) = await resp.execute(client, command, 1)
    assert replies.read_rows(empty) == []

    await client.xdel(stream, first)  # pending, then deleted: no fields any more
    parsed = await client.xreadgroup("g", "c", {stream: "0"}, count=10)
    live, deleted = replies.live_and_deleted(replies.stream_rows(parsed))
    assert [e.id for e in live] == [second.decode()] and deleted == [first.decode()]
    assert replies.stream_rows(await client.xreadgroup("g", "c", {stream: ">"}, count=1)) == []

    cursor, rows = replies.autoclaim_page(await client.xautoclaim(stream, "g", "d", 0, "0-0"))
    assert cursor == "0-0" and [e.id for e in replies.live_and_deleted(rows)[0]] == [
        second.decode()
    ]


async def test_pending_and_info_rows(speaking: aioredis.Redis, stream: str) -> None:
    client = speaking
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    added = [(await client.xadd(stream, {"type": "a", "data": str(i)})).decode() for i in range(3)]
    await client.xreadgroup("g", "c", {stream: ">"}, count=2)

    pending = replies.pending_rows(await client.xpending_range(stream, "g", "-", "+", 10))
    assert [(p.id, p.consumer, p.deliveries) for p in pending] == [
        (added[0], "c", 1),
        (added[1], "c", 1),
    ]
    assert replies.oldest_pending_id(await client.xpending(stream, "g")) == added[0]

    (group,) = replies.groups(await client.xinfo_groups(stream))
    assert (group.name, group.pending, group.last_delivered_id) == ("g", 2, added[1])
    assert group.lag in (1, None) and group.entries_read in (2, None)  # None before Redis 7
    (consumer,) = replies.consumers(await client.xinfo_consumers(stream, "g"))
    assert (consumer.name, consumer.pending) == ("c", 2) and consumer.idle_ms >= 0

    summary = replies.stream_summary(await client.xinfo_stream(stream))
    assert (summary.length, summary.first_id, summary.last_id) == (3, added[0], added[2])
    assert summary.last_generated_id == added[2] and summary.entries_added in (3, None)


def test_standard_fields_in_any_layout() -> None:
    assert replies.standard_fields([b"type", b"t", b"data", b"d"]) == (b"t", b"d", None)
    assert replies.standard_fields([b"type", b"t", b"data", b"d", b"meta", b"m"]) == (
        b"t",
        b"d",
        b"m",
    )
    assert replies.standard_fields([b"data", b"d", b"x", b"y", b"type", b"t"]) == (
        b"t",
        b"d",
        None,
    )


def test_claimed_entries_carry_their_earlier_deliveries() -> None:
    """``XREADGROUP ... CLAIM`` rows (Redis >= 8.4; the live path is test_claim_read.py)."""
    rows = [
        [b"1-0", [b"type", b"a", b"data", b"1"], 0, 0],
        [b"2-0", [b"type", b"b", b"data", b"2", b"meta", b"{}"], 5000, 3],
    ]
    got = [(e.id, e.fields.get(b"meta"), before) for e, before in replies.claimed_entries(rows)]
    assert got == [("1-0", None, 0), ("2-0", b"{}", 3)]


@pytest.mark.parametrize("blocking", [False, True])
async def test_tls_against_a_plain_port_names_the_cause(redis_url: str, blocking: bool) -> None:
    parts = urlsplit(redis_url)
    url = parts._replace(scheme="rediss").geturl()
    says = rf"TLS handshake with {parts.hostname}:{parts.port} got no answer: is it a plain port"
    started = time.monotonic()
    with pytest.raises(ServerUnavailableError, match=says):
        if blocking:
            with Publisher(url=url, stream="s") as publisher:
                publisher.publish("job", 1)
        else:
            async with MessageQueue(url=url, stream="s"):
                pass
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://user:secret@h:1/0", "got 'foo://'"),
        ("localhost:6379", "got no scheme"),
        ("user:secret@h://x", "got an unknown scheme"),
    ],
)
def test_a_url_of_another_scheme_is_refused_naming_every_scheme_taken(url: str, says: str) -> None:
    for make in (connect, connect_sync):
        with pytest.raises(ConfigError) as refused:
            make(url)
        message = str(refused.value)
        assert says in message and "secret" not in message, message
        assert "redis+sentinel://" in message and "rediss+sentinel://" in message, message
