"""The embedded Redis Cluster (EmbeddedCluster, `streamq server --cluster`, the plugin's
`streamq_cluster_url`) against real valkey-server processes, read through redis-py's own
cluster client. At most one cluster runs at a time (class-scoped fixtures, then the rest)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import MovedError
from redis.retry import Retry

from streamq import ConfigError, EmbeddedCluster, ServerUnavailableError
from streamq.server import free_port
from streamq.server.cluster_nodes import SLOTS
from tests.helpers.embedded import (
    all_gone,
    assert_end_with_their_parent,
    assert_fixture_takes_url_from,
    assert_server_command_refuses,
    server_pids,
)

pytestmark = pytest.mark.slow


def refuses(url: str) -> bool:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)).ping()
    except redis.ConnectionError:
        return True
    return False


def tags_on_each_master(cluster: EmbeddedCluster) -> dict[int, str]:
    """A hash tag per master port: keys ``{tag}...`` live on that master."""
    tags: dict[int, str] = {}
    masters = [n for n in cluster.nodes if n.role == "master"]
    for i in range(1000):
        tag = f"t{i}"
        tags.setdefault(cluster.master_of_slot(key_slot(tag.encode())).port, tag)
        if len(tags) == len(masters):
            return tags
    raise AssertionError("no hash tag for every master")


@pytest.fixture(scope="class")
def three_masters() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture(scope="class")
def replicated() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3, replicas=1) as cluster:
        yield cluster


class TestThreeMasters:
    @pytest.fixture
    def cluster(self, three_masters: EmbeddedCluster) -> EmbeddedCluster:
        return three_masters

    def test_every_slot_is_served_once_evenly_and_all_nodes_agree(
        self, cluster: EmbeddedCluster
    ) -> None:
        nodes = cluster.nodes
        assert [n.role for n in nodes] == ["master"] * 3
        assert [n.url for n in nodes] == cluster.urls and cluster.url in cluster.urls
        served = sorted(
            slot for n in nodes for first, last in n.slots for slot in range(first, last + 1)
        )
        assert served == list(range(SLOTS))
        sizes = [sum(last - first + 1 for first, last in n.slots) for n in nodes]
        assert max(sizes) - min(sizes) <= 1
        for url in cluster.urls:
            with redis.Redis.from_url(url, decode_responses=True) as client:
                info = client.execute_command("CLUSTER", "INFO")
                assert "cluster_state:ok" in info and "cluster_slots_ok:16384" in info
                assert "cluster_known_nodes:3" in info and "cluster_size:3" in info
        client = RedisCluster.from_url(cluster.urls[-1])
        try:
            assert sorted(n.port for n in client.get_primaries()) == sorted(n.port for n in nodes)
        finally:
            client.close()

    def test_hash_tags_land_on_different_masters_reached_through_any_node(
        self, cluster: EmbeddedCluster
    ) -> None:
        tags = tags_on_each_master(cluster)
        assert len(tags) == 3
        writer = RedisCluster.from_url(cluster.urls[0])
        try:
            for port, tag in tags.items():
                key = f"{{{tag}}}:k"
                writer.set(key, port)
                assert writer.get_node_from_key(key).port == port
        finally:
            writer.close()
        for url in cluster.urls:  # every node's URL reaches every key
            reader = RedisCluster.from_url(url)
            try:
                for port, tag in tags.items():
                    assert reader.get(f"{{{tag}}}:k") == str(port).encode()
            finally:
                reader.close()
        for port, tag in tags.items():  # stored on that master only: the others say MOVED
            for url in cluster.urls:
                with redis.Redis.from_url(url) as plain:
                    if url.endswith(f":{port}/0"):
                        assert plain.get(f"{{{tag}}}:k") == str(port).encode()
                    else:
                        with pytest.raises(MovedError):
                            plain.get(f"{{{tag}}}:k")

    def test_a_restarted_master_keeps_its_data_and_port(self, cluster: EmbeddedCluster) -> None:
        key = "{restart}:k"
        owner = cluster.master_of_slot(key_slot(key.encode()))
        with redis.Redis.from_url(owner.url) as plain:
            plain.set(key, "kept")
        cluster.kill_node(owner.port)
        assert refuses(owner.url)
        cluster.restart_node(owner.port)
        assert cluster.master_of_slot(key_slot(key.encode())) == owner
        client = RedisCluster.from_url(cluster.urls[0])
        try:
            assert client.get(key) == b"kept"
        finally:
            client.close()


class TestOneReplicaPerMaster:
    @pytest.fixture
    def cluster(self, replicated: EmbeddedCluster) -> EmbeddedCluster:
        return replicated

    def test_each_master_has_a_replica_that_replicates(self, cluster: EmbeddedCluster) -> None:
        nodes = cluster.nodes
        masters = {n.node_id: n for n in nodes if n.role == "master"}
        replicas = [n for n in nodes if n.role == "replica"]
        assert len(masters) == 3 and len(replicas) == 3 and len(cluster.urls) == 6
        assert sorted(str(r.master_id) for r in replicas) == sorted(masters)
        for replica in replicas:
            master = masters[str(replica.master_id)]
            key = f"{{{self._tag_on(cluster, master.port)}}}:r"
            with redis.Redis.from_url(master.url, decode_responses=True) as plain:
                plain.set(key, "copied")
                assert plain.execute_command("WAIT", 1, 1000) == 1
                assert plain.info("replication")["connected_slaves"] == 1
            with redis.Redis.from_url(replica.url, decode_responses=True) as plain:
                assert plain.info("replication")["master_link_status"] == "up"
                plain.execute_command("READONLY")
                assert plain.get(key) == "copied"

    def test_a_killed_master_is_replaced_by_its_replica(self, cluster: EmbeddedCluster) -> None:
        key = "{failover}:k"
        old = cluster.master_of_slot(key_slot(key.encode()))
        with redis.Redis.from_url(old.url) as plain:
            plain.set(key, "acknowledged")
            assert plain.execute_command("WAIT", 1, 1000) == 1
        cluster.kill_node(old.port)
        cluster.wait_ready()
        new = cluster.master_of_slot(key_slot(key.encode()))
        assert new.port != old.port and new.slots == old.slots
        client = RedisCluster.from_url(cluster.url)
        try:
            assert client.get(key) == b"acknowledged"
        finally:
            client.close()
        cluster.restart_node(old.port)  # it comes back as the new master's replica
        back = {n.port: n for n in cluster.nodes}[old.port]
        assert back.role == "replica" and back.master_id == new.node_id

    def test_stop_leaves_no_process_and_no_directory(self, cluster: EmbeddedCluster) -> None:
        pids = server_pids(cluster.urls)
        directory = cluster.directory
        assert directory is not None and directory.exists() and len(pids) == 6
        urls = cluster.urls
        cluster.stop()
        assert all_gone(pids, within=0)  # stop() waits for every process
        assert not directory.exists() and not cluster.running
        assert all(refuses(url) for url in urls)

    @staticmethod
    def _tag_on(cluster: EmbeddedCluster, port: int) -> str:
        return tags_on_each_master(cluster)[port]


def test_cli_server_cluster_starts_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "server", "--cluster", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        urls = [process.stdout.readline().strip() for _ in range(3)]
        assert all(url.startswith("redis://127.0.0.1:") for url in urls), urls
        for url in urls:
            with redis.Redis.from_url(url, decode_responses=True) as client:
                info = client.execute_command("CLUSTER", "INFO")
                assert "cluster_state:ok" in info and "cluster_known_nodes:3" in info
        pids = server_pids(urls)
    finally:
        process.send_signal(signal.SIGTERM)  # as a service manager stops it
        _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert "STREAMQ_CLUSTER_URL=redis://127.0.0.1:" in stderr
    assert all_gone(pids), "a node outlived the command"
    assert all(refuses(url) for url in urls)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--replicas", "1"), "--replicas needs --cluster"),
        (("--cluster", "0"), "masters must be between 1"),
        (("--cluster", "2", "--replicas", "-1"), "replicas must be 0 or more"),
    ],
)
def test_cli_server_refuses_replicas_without_cluster_and_bad_counts(
    args: tuple[str, ...], message: str
) -> None:
    assert_server_command_refuses(args, message)


def test_plugin_fixture_starts_one_cluster_for_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids_file = pytester.path / "pids.txt"
    pytester.makeconftest("")
    pytester.makepyfile(
        f"""
        import pytest, redis

        @pytest.mark.parametrize("n", [1, 2])
        def test_cluster(streamq_cluster_url, n):
            with redis.Redis.from_url(streamq_cluster_url, decode_responses=True) as client:
                assert "cluster_state:ok" in client.execute_command("CLUSTER", "INFO")
                pid = client.info("server")["process_id"]
            with open({str(pids_file)!r}, "a") as f:
                f.write(f"{{pid}}\\n")
        """
    )
    monkeypatch.delenv("STREAMQ_CLUSTER_URL", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(set(pids)) == 1, "one cluster for the whole session"
    assert all_gone(pids), "the session's cluster outlived the session"


def test_plugin_fixture_uses_the_cluster_url_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_fixture_takes_url_from(
        pytester, monkeypatch, "STREAMQ_CLUSTER_URL", "redis://127.0.0.1:7000/0"
    )


def test_nodes_are_stopped_when_the_parent_exits_without_stop() -> None:
    assert_end_with_their_parent(
        """
        import redis
        from streamq import EmbeddedCluster

        cluster = EmbeddedCluster(masters=1).start()
        for url in cluster.urls:
            print(redis.Redis.from_url(url).info("server")["process_id"], flush=True)
        """,
        count=1,
    )


def test_a_node_that_cannot_start_fails_with_the_nodes_logs() -> None:
    port = free_port()
    while port > 65535 - 10000:  # its cluster bus port (+10000) must exist
        port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))  # bound, not listening: taken, yet refuses at once
        cluster = EmbeddedCluster(masters=1, port=port)
        with pytest.raises(ServerUnavailableError, match="did not start") as caught:
            cluster.start()
    assert f"on port {port}" in str(caught.value)
    assert "Address already in use" in str(caught.value)
    assert not cluster.running and cluster.directory is None


def test_bad_arguments_are_config_errors() -> None:
    for kwargs in ({"masters": 0}, {"replicas": -1}, {"port": 60000}):
        with pytest.raises(ConfigError):
            EmbeddedCluster(**kwargs)
