"""The embedded Sentinel set (EmbeddedSentinel, `streamq server --sentinel`, the plugin's
`streamq_sentinel_url`) against real valkey-server processes: what the sentinels see,
clean stops, bad arguments. Failover is in tests/wire/test_sentinel.py."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import redis

from streamq import ConfigError, EmbeddedSentinel
from streamq.wire.sentinel import SentinelUrl, is_sentinel_url, sync_client
from tests.helpers.embedded import (
    all_gone,
    assert_end_with_their_parent,
    assert_fixture_takes_url_from,
    assert_server_command_refuses,
    local_urls,
    server_pids,
)

pytestmark = pytest.mark.slow


def sentinel_clients(url: str) -> list[redis.Redis]:
    return [
        redis.Redis(host=host, port=port, decode_responses=True)
        for host, port in SentinelUrl.parse(url).sentinels
    ]


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
    pids = server_pids(local_urls(ports))
    directory = embedded.directory
    assert len(set(pids)) == 5 and directory is not None and directory.is_dir()
    embedded.stop()
    assert all_gone(pids, within=0), "stop() returned before every process ended"
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
            EmbeddedSentinel(**kwargs)
        assert problem in str(caught.value)


def test_plugin_fixture_uses_the_sentinel_url_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_fixture_takes_url_from(
        pytester,
        monkeypatch,
        "STREAMQ_SENTINEL_URL",
        "redis+sentinel://127.0.0.1:26379/elsewhere",
    )


def test_the_processes_end_when_the_parent_exits_without_stop() -> None:
    assert_end_with_their_parent(
        """
        import redis
        from streamq import EmbeddedSentinel

        embedded = EmbeddedSentinel(replicas=1, sentinels=1).start()
        for port in [*embedded.data_ports, *embedded.sentinel_ports]:
            print(redis.Redis(port=port).info("server")["process_id"], flush=True)
        """,
        count=3,
    )


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
            pids = server_pids(local_urls([*ports, client.connection_pool.master_address[1]]))
    finally:
        process.send_signal(signal.SIGTERM)  # as a service manager stops it
        _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert f"STREAMQ_SENTINEL_URL={url}" in stderr
    assert all_gone(pids), "a process outlived the command"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--sentinel", "--cluster", "3"), "--sentinel takes only --replicas"),
        (("--sentinel", "--replicas", "-1"), "replicas must be 0 or more"),
    ],
)
def test_cli_server_sentinel_refuses_options_it_does_not_take(
    args: tuple[str, ...], message: str
) -> None:
    assert_server_command_refuses(args, message)
