"""A publish whose outcome is unknown (its reply cut midway, or never coming) is sent again
by itself and adds its entry once (streamq.publish.resend), through the fault proxy in front
of the real server (tests/helpers/fault_proxy.py)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import MessageQueue, NotReplicatedError, Publisher
from streamq.message import PUBLISH_MARKER
from streamq.publish.plan import Fields
from streamq.publish.resend import Producer, resend_command, resend_one
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.queues import QueueFactory, queue
from tests.payload.helpers import BIG, keyring

pytestmark = pytest.mark.anyio

REPLY_TIMEOUT = 0.5  # the queue's socket timeout: a swallowed reply fails after this


@pytest.fixture
async def proxy(redis_url: str, on_cluster: bool) -> AsyncIterator[FaultProxy]:
    if on_cluster:
        pytest.skip("the proxy fronts one node; a cluster's clients follow its slot table")
    proxy = FaultProxy(urlparse(redis_url).port or 6379)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        yield proxy
        tg.cancel_scope.cancel()


@pytest.fixture
async def behind(proxy: FaultProxy, stream: str) -> AsyncIterator[MessageQueue]:
    """A queue (publishing only) that reaches the server through the proxy."""
    mq = queue(f"{proxy.url}?socket_timeout={REPLY_TIMEOUT}", stream)
    yield mq
    await mq.aclose()


async def entries(client: aioredis.Redis, stream: str) -> list[tuple[str, bytes]]:
    """(ID, data) of every entry, read past the proxy."""
    return [(i.decode(), f[b"data"]) for i, f in await client.xrange(stream)]


@pytest.mark.parametrize("how", ["cut", "swallow"])
async def test_a_publish_whose_reply_was_lost_is_added_once(
    proxy: FaultProxy, behind: MessageQueue, client: aioredis.Redis, stream: str, how: str
) -> None:
    mq = behind
    before = [await mq.publish("job", 7) for _ in range(2)]  # the same payload, twice
    proxy.fail_next_reply(how)
    entry_id = await mq.publish("job", 7)  # added, its reply lost: sent again, checked
    assert proxy.counts["armed" if how == "cut" else "swallowed"] == 1
    assert proxy.counts["cut"] == (how == "cut")
    assert await entries(client, stream) == [(i, b"7") for i in [*before, entry_id]]
    assert await mq.publish("job", 8)  # and the queue goes on
    assert len(await entries(client, stream)) == 4


@pytest.mark.parametrize("how", ["cut", "swallow"])
async def test_a_durable_publish_whose_reply_was_lost_is_added_once(
    proxy: FaultProxy, behind: MessageQueue, client: aioredis.Redis, stream: str, how: str
) -> None:
    """``replicas=`` sends its XADD and WAIT together; the XADD's reply lost, both are sent
    again, checked. This node has no replica: each WAIT gives up after ``timeout``, the
    publish raises NotReplicatedError naming the one entry it added."""
    mq = behind
    before = await mq.publish("job", 7)  # connected: the next reply is the durable publish's
    proxy.fail_next_reply(how)
    with pytest.raises(NotReplicatedError) as failure:
        await mq.publish("job", 7, replicas=1, timeout=0.1)
    assert proxy.counts["armed" if how == "cut" else "swallowed"] == 1
    assert failure.value.replicas == 0
    assert await entries(client, stream) == [(before, b"7"), (failure.value.entry_id, b"7")]


async def test_a_publish_that_never_arrived_is_added_by_the_second_send(
    proxy: FaultProxy, behind: MessageQueue, client: aioredis.Redis, stream: str
) -> None:
    mq = behind
    first = await mq.publish("job", 1)
    assert proxy.half_open(0.2) >= 1  # the open connections swallow what is sent
    entry_id = await mq.publish("job", 2)  # times out, is sent on a new connection
    assert proxy.counts["half_open"] >= 1
    assert await entries(client, stream) == [(first, b"1"), (entry_id, b"2")]


async def test_publish_many_whose_replies_were_cut_adds_each_item_once(
    proxy: FaultProxy, behind: MessageQueue, client: aioredis.Redis, stream: str
) -> None:
    mq = behind
    first = await mq.publish("job", -1)
    proxy.fail_next_reply("cut")
    ids = await mq.publish_many("job", list(range(300)), chunk=100)
    assert proxy.counts["cut"] == 1
    want = [(first, b"-1")] + [(i, str(n).encode()) for n, i in enumerate(ids)]
    assert await entries(client, stream) == want


@pytest.mark.parametrize("how", ["cut", "swallow"])
async def test_the_blocking_publisher_adds_once_too(
    proxy: FaultProxy, client: aioredis.Redis, stream: str, how: str
) -> None:
    url = f"{proxy.url}?socket_timeout={REPLY_TIMEOUT}"

    def publish_all() -> list[str]:
        with Publisher(url, stream=stream) as publisher:
            ids = [publisher.publish("job", 1)]
            proxy.fail_next_reply(how)  # a plain attribute: set from this thread is fine
            ids.append(publisher.publish("job", 2))
            proxy.fail_next_reply(how)
            ids += publisher.publish_many("job", [3, 4, 5])
            return ids

    ids = await anyio.to_thread.run_sync(publish_all)
    assert proxy.counts["cut" if how == "cut" else "swallowed"] == 2
    assert await entries(client, stream) == list(
        zip(ids, [b"1", b"2", b"3", b"4", b"5"], strict=True)
    )


async def test_the_resend_script_returns_what_was_added_and_adds_the_rest(
    client: aioredis.Redis, stream: str
) -> None:
    """What a second send runs, on its own: entries found by their marker (among other
    producers' entries of the same payload) come back with their IDs; the others are added,
    in order, once however often it runs."""
    producer, sent = Producer(), time.monotonic()
    marker = producer.marker()
    chunk: list[Fields] = [{"type": "job", "data": str(n)} for n in range(3)]
    added = (await client.xadd(stream, {"pub": marker, **chunk[0]})).decode()
    await client.xadd(stream, {"type": "job", "data": "1", "pub": "0123456789ab.2"})
    resend = resend_one(stream, {**chunk[0], PUBLISH_MARKER: marker}, sent, make_stream=False)
    ids = [i.decode() for i in await client.execute_command(*resend)]
    assert ids == [added] and len(await entries(client, stream)) == 2
    resend = resend_command(stream, chunk, marker, sent, make_stream=False)  # publish_many
    ids = [i.decode() for i in await client.execute_command(*resend)]
    assert ids[0] == added and len(set(ids)) == 3
    assert [i.decode() for i in await client.execute_command(*resend)] == ids
    rows = await entries(client, stream)
    assert [data for _, data in rows] == [b"0", b"1", b"1", b"2"]
    assert [i for i, _ in rows if i in ids] == ids
    missing = f"{{{stream}}}-missing"  # the stream's slot: on a cluster, the same node
    gone = resend_command(missing, chunk[:1], marker, sent, make_stream=False)
    assert await client.execute_command(*gone) == [None]  # NOMKSTREAM: no stream, nothing


async def test_an_encoded_entry_sent_again_is_added_once_its_marker_plain(
    proxy: FaultProxy, client: aioredis.Redis, stream: str
) -> None:
    """The payload codec encodes ``data`` (compressed, encrypted, the entry's ``enc`` and
    ``kid``); the marker comes after it, as plain text, and the second send finds the entry
    the first added."""
    mq = queue(f"{proxy.url}?socket_timeout={REPLY_TIMEOUT}", stream, compression="zstd",
               compress_over=10, encryption=keyring())  # fmt: skip
    try:
        first = await mq.publish("job", BIG)  # connected: the next reply is the publish's
        proxy.fail_next_reply("cut")
        entry_id = await mq.publish("job", BIG)
    finally:
        await mq.aclose()
    assert proxy.counts["cut"] == 1
    (one, _), (found, fields) = await client.xrange(stream)
    assert [one.decode(), found.decode()] == [first, entry_id]
    assert fields[b"enc"] == b"zstd+aesgcm" and fields[b"kid"] == b"k1"
    assert list(fields)[-1] == PUBLISH_MARKER
    assert re.fullmatch(rb"[0-9a-f]{12}\.\d+", fields[PUBLISH_MARKER])


async def test_each_publish_has_its_marker_and_each_chunk_of_publish_many_one(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue()
    await mq.publish("job", 1)
    await mq.publish("job", 2)
    await mq.publish_many("job", list(range(5)), chunk=2)
    rows = await client.xrange(stream)
    assert all(list(fields)[-1] == PUBLISH_MARKER for _, fields in rows)
    markers = [fields[PUBLISH_MARKER] for _, fields in rows]
    assert len(set(markers[:2])) == 2  # one per publish
    assert markers[2] == markers[3] != markers[4] == markers[5] != markers[6]  # per chunk
    assert len(set(markers)) == 5
