"""Redis Sentinel: the URL form (streamq.wire.sentinel), clients built from it, and the
embedded master + replica + three sentinels (EmbeddedSentinel) they are tested against,
failover included: a killed master is replaced and the same client object reaches the new
one. Tests that kill a master start their own set; the others share the plugin's
session-wide ``streamq_sentinel_url``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import pytest
import redis
import redis.asyncio as aioredis

from streamq import ConfigError, EmbeddedSentinel
from streamq.server import free_port
from streamq.wire.sentinel import SentinelUrl, async_client, is_sentinel_url, sync_client

T = TypeVar("T")
TRANSIENT = (redis.ConnectionError, redis.TimeoutError)  # MasterNotFoundError included
FAILOVER_WAIT = 30.0  # bounded wait for a failover (a few seconds on an idle machine)


# -- the URL ---------------------------------------------------------------------------------
def test_a_url_with_every_part_parses() -> None:
    parsed = SentinelUrl.parse(
        "redis+sentinel://alice:s3cret%40x@sa:26380,sb,[::1]:26381/orders%2Dmaster/2"
        "?sentinel_username=watch&sentinel_password=w%26tch&protocol=3"
    )
    assert parsed.sentinels == (("sa", 26380), ("sb", 26379), ("::1", 26381))
    assert (parsed.service_name, parsed.db) == ("orders-master", 2)
    assert (parsed.username, parsed.password) == ("alice", "s3cret@x")
    assert (parsed.sentinel_username, parsed.sentinel_password) == ("watch", "w&tch")
    assert parsed.protocol == 3 and not parsed.ssl


def test_a_minimal_url_and_a_tls_url_parse() -> None:
    plain = SentinelUrl.parse("redis+sentinel://127.0.0.1:26379/mymaster")
    assert plain == SentinelUrl(sentinels=(("127.0.0.1", 26379),), service_name="mymaster")
    assert plain.db == 0 and plain.password is None and plain.protocol is None
    tls = SentinelUrl.parse(
        "REDISS+SENTINEL://:pw@h:1/svc/0?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem"
    )
    assert tls.ssl and (tls.username, tls.password) == (None, "pw")
    assert (tls.ssl_cert_reqs, tls.ssl_ca_certs) == ("required", "/etc/ca.pem")


def test_is_sentinel_url_knows_both_schemes_only() -> None:
    assert is_sentinel_url("redis+sentinel://h:1/svc")
    assert is_sentinel_url("rediss+sentinel://h:1/svc")
    assert is_sentinel_url("Redis+Sentinel://h:1/svc")
    for other in ("redis://h:1/0", "rediss://h:1/0", "redis+sentinel:/h", "", "sentinel://h"):
        assert not is_sentinel_url(other), other


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://u:s3cret@h:1/svc", "the scheme must be one of"),
        ("redis+sentinel://u:s3cret@/svc", "no sentinel named"),
        ("redis+sentinel://u:s3cret@h:1", "no service name"),
        ("redis+sentinel://u:s3cret@h:1/", "no service name"),
        ("redis+sentinel://u:s3cret@h:port/svc", "sentinel 1 (h): the port must be a number"),
        ("redis+sentinel://u:s3cret@h:0/svc", "the port must be a number from 1 to 65535"),
        ("redis+sentinel://u:s3cret@h:1,,h:2/svc", "sentinel 2 has no host"),
        ("redis+sentinel://u:s3cret@[::1/svc", "an IPv6 address is written [address]:port"),
        ("redis+sentinel://u:s3cret@h:1/svc/x", "the database 'x' is not a number"),
        ("redis+sentinel://u:s3cret@h:1/svc/0/more", "more than /service_name/db"),
        ("redis+sentinel://u:s3cret@h:1/my%20svc", "holds a space"),
        ("redis+sentinel://u:s3cret@h:1/svc?db=1", "unknown option 'db'; the options are"),
        ("redis+sentinel://u:s3cret@h:1/svc?protocol=4", "'protocol' must be 2 or 3"),
        ("redis+sentinel://u:s3cret@h:1/svc?protocol=2&protocol=3", "given twice"),
        ("rediss+sentinel://u:s3cret@h:1/svc?ssl_cert_reqs=maybe", "'ssl_cert_reqs' must be"),
        # reserved characters left in a password: refused without echoing any part of it
        ("redis+sentinel://u:s3cr/et@h:1/svc", "percent-encode the password"),
        ("redis+sentinel://u:s3cr?et@h:1/svc", "percent-encode the password"),
        ("redis+sentinel://u:s3cr#et@h:1/svc", "percent-encode it in a password"),
    ],
)
def test_a_bad_url_is_a_config_error_that_names_the_problem_not_the_password(
    url: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        SentinelUrl.parse(url)
    message = str(caught.value)
    assert problem in message, message
    assert message.startswith("invalid Sentinel URL: ") and "redis+sentinel://" in message
    for secret in ("s3cret", "s3cr", "et@"):
        assert secret not in message, message


def test_repr_and_str_never_show_a_password() -> None:
    parsed = SentinelUrl.parse(
        "redis+sentinel://bob:s3cret@h1:5,[::1]:6/svc/1?sentinel_password=hush&protocol=2"
    )
    assert "s3cret" not in repr(parsed) and "hush" not in repr(parsed)
    assert str(parsed) == (
        "redis+sentinel://bob:***@h1:5,[::1]:6/svc/1?protocol=2&sentinel_password=***"
    )
    again = SentinelUrl.parse(str(parsed))  # the shown form is itself a valid URL
    assert (again.sentinels, again.service_name, again.db) == (parsed.sentinels, "svc", 1)


def test_a_tls_url_makes_tls_connections_to_the_master_and_the_sentinels() -> None:
    client = sync_client("rediss+sentinel://h:1,h:2/svc?ssl_cert_reqs=none")
    try:
        pool = client.connection_pool
        assert issubclass(pool.connection_class, redis.SSLConnection)
        for sentinel in pool.sentinel_manager.sentinels:
            assert issubclass(sentinel.connection_pool.connection_class, redis.SSLConnection)
    finally:
        client.close()


def test_a_client_of_a_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no service name"):
        async_client("redis+sentinel://h:1")
    with pytest.raises(ConfigError, match="the scheme must be"):
        sync_client("redis://h:1/0")


# -- the embedded set ------------------------------------------------------------------------
def sentinel_clients(url: str) -> list[redis.Redis]:
    return [
        redis.Redis(host=host, port=port, decode_responses=True)
        for host, port in SentinelUrl.parse(url).sentinels
    ]


def pids_of(ports: list[int]) -> list[int]:
    pids = []
    for port in ports:
        with redis.Redis(port=port) as client:
            pids.append(int(client.info("server")["process_id"]))
    return pids


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_every_sentinel_watches_the_master_its_replica_and_the_others(
    streamq_sentinel_url: str,
) -> None:
    assert streamq_sentinel_url.startswith("redis+sentinel://127.0.0.1:")
    assert streamq_sentinel_url.count(",") == 2 and streamq_sentinel_url.endswith("/streamq")
    for sentinel in sentinel_clients(streamq_sentinel_url):
        with sentinel:
            state = sentinel.sentinel_master("streamq")
            assert state["is_master"] and not state["is_sdown"], state
            assert (state["quorum"], state["num-other-sentinels"], state["num-slaves"]) == (2, 2, 1)
            (replica,) = sentinel.sentinel_slaves("streamq")
            assert replica["master-link-status"] == "ok" and not replica["is_sdown"]


def test_stop_leaves_no_process_and_no_directory() -> None:
    embedded = EmbeddedSentinel(replicas=1, sentinels=3).start()
    ports = [*embedded.data_ports, *embedded.sentinel_ports]
    pids = pids_of(ports)
    directory = embedded.directory
    assert len(set(pids)) == 5 and directory is not None and directory.is_dir()
    embedded.stop()
    assert all(gone(pid) for pid in pids), "stop() returned before every process ended"
    assert not directory.exists() and not embedded.running
    embedded.stop()  # idempotent


def test_bad_arguments_are_config_errors() -> None:
    for kwargs, problem in (
        ({"replicas": -1}, "replicas must be 0 or more"),
        ({"sentinels": 0}, "sentinels must be 1 or more"),
        ({"quorum": 4}, "quorum must be between 1 and sentinels (3)"),
        ({"service_name": "my master"}, "service_name must be a word"),
        ({"down_after": 0}, "must be positive seconds"),
    ):
        with pytest.raises(ConfigError) as caught:
            EmbeddedSentinel(**kwargs)  # type: ignore[arg-type]
        assert problem in str(caught.value)


def test_plugin_fixture_uses_the_sentinel_url_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest("")
    pytester.makepyfile(
        """
        def test_url(streamq_sentinel_url):
            assert streamq_sentinel_url == "redis+sentinel://127.0.0.1:26379/elsewhere"
        """
    )
    monkeypatch.setenv("STREAMQ_SENTINEL_URL", "redis+sentinel://127.0.0.1:26379/elsewhere")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_processes_end_when_the_parent_exits_without_stop() -> None:
    script = textwrap.dedent(
        """
        import redis
        from streamq import EmbeddedSentinel

        embedded = EmbeddedSentinel(replicas=1, sentinels=1).start()
        for port in [*embedded.data_ports, *embedded.sentinel_ports]:
            print(redis.Redis(port=port).info("server")["process_id"], flush=True)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    pids = [int(line) for line in result.stdout.split()]
    try:
        assert result.returncode == 0 and len(pids) == 3, result.stderr
        assert _all_gone(pids), "a process outlived its parent"
    finally:
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_cli_server_sentinel_prints_a_working_url_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "server", "--sentinel"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert is_sentinel_url(url), url
        with sync_client(url) as client:
            assert client.execute_command("ROLE")[0] == b"master"
            assert client.execute_command("WAIT", 1, 5000) == 1  # one replica by default
            ports = [p for _, p in SentinelUrl.parse(url).sentinels]
            pids = pids_of([*ports, client.connection_pool.master_address[1]])
    finally:
        process.send_signal(signal.SIGTERM)  # as a service manager stops it
        _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert f"STREAMQ_SENTINEL_URL={url}" in stderr
    assert _all_gone(pids), "a process outlived the command"


def test_cli_server_sentinel_refuses_options_it_does_not_take() -> None:
    for args, message in (
        (("--sentinel", "--cluster", "3"), "--sentinel takes only --replicas"),
        (("--sentinel", "--replicas", "-1"), "replicas must be 0 or more"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "streamq.cli", "server", *args],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def _all_gone(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not all(gone(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


# -- clients through the sentinels -----------------------------------------------------------
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
    try:
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_append, results, client.blpop([key], 0.5))
            await anyio.sleep(0.1)  # the only connection is now blocked in BLPOP
            assert await client.ping() is True  # waited for it instead of failing
        assert results == [None]
        async with anyio.create_task_group() as tg:
            tg.start_soon(impatient.blpop, [key], 0.5)
            await anyio.sleep(0.1)
            with pytest.raises(redis.ConnectionError, match="No connection available"):
                await impatient.ping()
    finally:
        await client.aclose()
        await impatient.aclose()


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


# -- failover ------------------------------------------------------------------------------
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
        entry_id = await _retried(lambda n=n: client.xadd(stream, {"n": f"late-{n}"}))
        ids.append(entry_id)


async def _consume(
    client: aioredis.Redis, stream: str, group: str, total: int, handled: list[bytes]
) -> None:
    with anyio.fail_after(FAILOVER_WAIT):
        while len(handled) < total:
            handled += await _retried(lambda: _read_and_ack(client, stream, group, count=5))
