"""Clients of a Redis Sentinel URL (streamq.wire.sentinel) against the embedded master,
replica and three sentinels: raw replies, a blocking pool, lookups at once, and failover:
a killed master is replaced and the same client object reaches the new one. Tests that kill
a master start their own set; the others share the plugin's ``streamq_sentinel_url``.
(The URL form: tests/wire/test_sentinel_url.py; the set itself: tests/server/test_embedded_sentinel.py.)"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import pytest
import redis
import redis.asyncio as aioredis

from streamq import EmbeddedSentinel
from streamq.server import free_port
from streamq.wire.pool_options import CONNECTION_OPTIONS, MAX_CONNECTIONS
from streamq.wire.sentinel import async_client, sync_client
from streamq.wire.timeouts import SOCKET_TIMEOUT
from tests.helpers.waiting import wait_for, wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")
TRANSIENT = (redis.ConnectionError, redis.TimeoutError)  # MasterNotFoundError included
FAILOVER_WAIT = 30.0  # bounded wait for a failover (a few seconds on an idle machine)


@pytest.mark.anyio
async def test_an_async_client_from_the_url_writes_and_reads_raw_bytes_on_the_master(
    streamq_sentinel_url: str,
) -> None:
    key = f"test-{uuid.uuid4().hex[:12]}"
    client = async_client(streamq_sentinel_url)
    try:
        assert await client.set(key, "é") is True
        assert await client.get(key) == "é".encode()
        assert (await client.execute_command("ROLE"))[0] == b"master"
        assert await client.execute_command("WAIT", 1, 5000) == 1  # its replica follows
    finally:
        await client.delete(key)
        await client.aclose()
    for sentinel in _sentinels_of(client):  # closed with the client, not left open
        assert not any(c.is_connected for c in sentinel.connection_pool._available_connections)


@pytest.mark.anyio
async def test_a_full_pool_waits_for_a_free_connection_then_gives_up(
    streamq_sentinel_url: str,
) -> None:
    key = f"test-{uuid.uuid4().hex[:12]}"
    client = async_client(streamq_sentinel_url, max_connections=1, pool_timeout=10)
    impatient = async_client(streamq_sentinel_url, max_connections=1, pool_timeout=0.05)
    observer = async_client(streamq_sentinel_url)
    try:
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_append, results, client.blpop([key], 0.5))
            await wait_for(lambda: _blocked(observer), what="the only connection in BLPOP")
            assert await client.ping() is True  # waited for it instead of failing
        assert results == [None]
        async with anyio.create_task_group() as tg:
            tg.start_soon(impatient.blpop, [key], 0.5)
            await wait_for(lambda: _blocked(observer), what="the only connection in BLPOP")
            with pytest.raises(redis.ConnectionError, match="No connection available"):
                await impatient.ping()
    finally:
        await client.aclose()
        await impatient.aclose()
        await observer.aclose()


@pytest.mark.anyio
async def test_lookups_at_once_keep_every_sentinel_and_close_them_all(
    streamq_sentinel_url: str,
) -> None:
    # A dead sentinel first: every lookup passes it and moves a live one to the front, the
    # step that, run by many connections at once, lost a sentinel in redis-py's own list.
    dead = free_port()
    hosts = streamq_sentinel_url.split("//", 1)[1]
    client = async_client(f"redis+sentinel://127.0.0.1:{dead},{hosts}", max_connections=20)
    try:
        assert await run_together([client.ping() for _ in range(20)]) == [True] * 20
        sentinels = _sentinels_of(client)
        assert len({id(s) for s in sentinels}) == 4, "a sentinel fell out of the list"
    finally:
        await client.aclose()
    for sentinel in sentinels:
        assert not any(c.is_connected for c in sentinel.connection_pool._available_connections)


def test_a_sync_client_from_the_url_writes_and_reads_raw_bytes(streamq_sentinel_url: str) -> None:
    key = f"test-{uuid.uuid4().hex[:12]}"
    with sync_client(streamq_sentinel_url) as client:
        client.set(key, "v")
        assert client.get(key) == b"v"
        assert client.execute_command("ROLE")[0] == b"master"
        client.delete(key)


def test_a_full_sync_pool_waits_for_a_free_connection_then_gives_up(
    streamq_sentinel_url: str,
) -> None:
    """Threads sharing the blocking client get what asyncio tasks get: at most
    ``max_connections``, a caller past the limit waiting ``pool_timeout`` for a free one (a
    pool without a limit opened a connection per thread, one with a limit failed at once)."""
    key = f"test-{uuid.uuid4().hex[:12]}"
    client = sync_client(streamq_sentinel_url, max_connections=1, pool_timeout=10)
    impatient = sync_client(streamq_sentinel_url, max_connections=1, pool_timeout=0.05)
    observer = sync_client(streamq_sentinel_url)
    try:
        assert observer.connection_pool.max_connections == MAX_CONNECTIONS
        for blocked, wait in ((client, True), (impatient, False)):
            holder = threading.Thread(target=blocked.blpop, args=([key], 0.5))
            holder.start()
            wait_until(
                lambda: observer.info("clients")["blocked_clients"] >= 1,
                what="the only connection blocked in BLPOP",
            )
            if wait:
                assert blocked.ping() is True  # waited for it instead of failing
            else:
                with pytest.raises(redis.ConnectionError, match="No connection available"):
                    blocked.ping()
            holder.join()
    finally:
        client.close()
        impatient.close()
        observer.close()


async def _blocked(observer: aioredis.Redis) -> bool:
    """Whether a client of the master waits in a blocking command."""
    return int((await observer.info("clients"))["blocked_clients"]) >= 1


# -- failover ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_master_connections_have_the_connection_options_of_every_client(
    streamq_sentinel_url: str,
) -> None:
    """As plain URLs' clients (raw replies, no redis-py retries, keepalive): a master that
    stops answering is a lost connection after SOCKET_TIMEOUT, not a wait for ever
    (redis-py < 8 sets no timeout by default)."""
    client = async_client(streamq_sentinel_url)
    blocking = sync_client(streamq_sentinel_url)
    try:
        for pool in (client.connection_pool, blocking.connection_pool):
            assert pool.connection_kwargs["socket_timeout"] == SOCKET_TIMEOUT
            given = {k: pool.connection_kwargs.get(k, "not given") for k in CONNECTION_OPTIONS}
            assert given == CONNECTION_OPTIONS
    finally:
        await client.aclose()
        blocking.close()


@pytest.fixture
def fresh_set() -> Iterator[EmbeddedSentinel]:
    """A set of its own: these tests kill its master."""
    with EmbeddedSentinel(replicas=1, sentinels=3) as embedded:
        yield embedded


@pytest.mark.anyio
async def test_after_a_failover_the_same_clients_reach_the_new_master_with_replicated_data(
    fresh_set: EmbeddedSentinel,
) -> None:
    client = async_client(fresh_set.url)
    blocking = sync_client(fresh_set.url)
    try:
        await client.set("before", "replicated")
        assert await client.execute_command("WAIT", 1, 5000) == 1  # on the replica too
        assert blocking.get("before") == b"replicated"
        old = fresh_set.kill_master()
        began = time.monotonic()
        errors: list[BaseException] = []
        assert await _retried(lambda: client.get("before"), errors) == b"replicated"
        failover_took = time.monotonic() - began
        new = await anyio.to_thread.run_sync(fresh_set.wait_for_new_master)
        assert new != old and new in fresh_set.data_ports
        assert client.connection_pool.master_address == ("127.0.0.1", new)
        assert (await client.execute_command("ROLE"))[0] == b"master"
        await client.set("after", "written")  # a master: writes are accepted
        # idle through the failover: its next command finds the new master (its pool
        # replaces the dead connection on checkout; at most one error otherwise)
        idle_errors: list[BaseException] = []
        assert _sync_retried(lambda: blocking.get("after"), idle_errors) == b"written"
        assert len(idle_errors) <= 1, idle_errors
        assert blocking.connection_pool.master_address == ("127.0.0.1", new)
        # no master for a while (down-after 1 s, then the election): the client said so,
        # redis-py did not hide it in retries; only transient errors, then the new master
        assert errors and all(isinstance(e, TRANSIENT) for e in errors), errors
        assert failover_took < FAILOVER_WAIT
    finally:
        await client.aclose()
        blocking.close()


@pytest.mark.anyio
async def test_a_consume_loop_through_the_client_rides_through_a_failover(
    fresh_set: EmbeddedSentinel,
) -> None:
    stream, group = "orders", "billing"
    client = async_client(fresh_set.url)
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
        early = [await client.xadd(stream, {"n": str(n)}) for n in range(20)]
        acked_early = await _read_and_ack(client, stream, group, count=10)
        assert acked_early == early[:10]
        assert await client.execute_command("WAIT", 1, 5000) == 1  # entries, group, acks
        fresh_set.kill_master()
        late: list[bytes] = []
        handled: list[bytes] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_publish, client, stream, 20, late)
            tg.start_soon(_consume, client, stream, group, 30, handled)
        assert sorted(handled) == sorted(early[10:] + late)  # each once; nothing acked lost
        assert len(handled) == len(set(handled)) == 30
        assert (await client.xpending(stream, group))["pending"] == 0
        assert (await client.execute_command("ROLE"))[0] == b"master"
    finally:
        await client.aclose()


# -- helpers -------------------------------------------------------------------------------
async def run_together(calls: list[Awaitable[T]]) -> list[T]:
    """Every call at once (each on a connection of its own), results in order."""
    results: dict[int, T] = {}

    async def run(index: int, call: Awaitable[T]) -> None:
        results[index] = await call

    async with anyio.create_task_group() as tg:
        for index, call in enumerate(calls):
            tg.start_soon(run, index, call)
    return [results[i] for i in range(len(calls))]


async def _append(results: list[Any], call: Awaitable[Any]) -> None:
    results.append(await call)


def _sentinels_of(client: aioredis.Redis) -> list[aioredis.Redis]:
    return list(client.connection_pool.sentinel_manager.sentinels)


async def _retried(
    call: Callable[[], Awaitable[T]], errors: list[BaseException] | None = None
) -> T:
    """``call()`` retried on transient errors (a failover under way) for a bounded time."""
    deadline = time.monotonic() + FAILOVER_WAIT
    while True:
        try:
            return await call()
        except TRANSIENT as e:
            if errors is not None:
                errors.append(e)
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.05)


def _sync_retried(call: Callable[[], T], errors: list[BaseException]) -> T:
    deadline = time.monotonic() + FAILOVER_WAIT
    while True:
        try:
            return call()
        except TRANSIENT as e:
            errors.append(e)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def _read_and_ack(
    client: aioredis.Redis, stream: str, group: str, *, count: int
) -> list[bytes]:
    reply = await client.xreadgroup(group, "c1", {stream: ">"}, count=count, block=100)
    ids = [entry_id for entry_id, _fields in (reply[0][1] if reply else [])]
    if ids:
        await client.xack(stream, group, *ids)
    return ids


async def _publish(client: aioredis.Redis, stream: str, count: int, ids: list[bytes]) -> None:
    for n in range(count):  # one at a time: each retried until a master accepts it
        entry_id = await _retried(functools.partial(client.xadd, stream, {"n": f"late-{n}"}))
        ids.append(entry_id)


async def _consume(
    client: aioredis.Redis, stream: str, group: str, total: int, handled: list[bytes]
) -> None:
    with anyio.fail_after(FAILOVER_WAIT):
        while len(handled) < total:
            handled += await _retried(lambda: _read_and_ack(client, stream, group, count=5))


@pytest.mark.anyio
async def test_a_message_queue_on_a_sentinel_url_rides_through_a_failover(
    fresh_set: EmbeddedSentinel,
) -> None:
    from tests.wire.test_cluster import Load, run_under_load  # the same load as on a cluster

    # after the failover the new master has no replica (the old one is not restarted):
    # each durable publish then waits its whole timeout and reports NotReplicatedError
    load = Load(fresh_set.url, f"test-{uuid.uuid4().hex[:8]}", replicas=1, wait=0.05)

    def failover() -> None:
        old = fresh_set.kill_master()
        assert fresh_set.wait_for_new_master() != old

    await run_under_load(load, failover)
