"""Issue 15, the shared embedded server: one server per user and state directory, reached
by every process that uses the default, started once under a lock, stopped by its last
user (a SIGKILLed one too), reused after crashes with its data."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streamq import MessageQueue, Publisher
from streamq.server import shared
from streamq.server.keeper import Paths, pid_alive, server_pid
from tests.helpers.processes import processes_of
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

ATTACH_AND_WAIT = textwrap.dedent(
    """
    import os, sys
    import redis
    from streamq.server import default_url
    url = default_url()
    redis.Redis.from_url(url).sadd("users", os.getpid())
    print(url, flush=True)
    sys.stdin.readline()  # live until the test closes our stdin
    """
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private $STREAMQ_HOME, with no $STREAMQ_REDIS_URL; nothing may outlive the test."""
    state = tmp_path / "streamq-home"
    monkeypatch.setenv(shared.ENV_HOME, str(state))
    monkeypatch.delenv("STREAMQ_REDIS_URL", raising=False)
    yield state
    shared.release_all()
    leftover = processes_of(state)
    shared.stop_server(state)
    wait_until(lambda: not processes_of(state), what="the shared server to stop")
    assert not leftover, f"processes left running after the test: {leftover}"


def attach_in_subprocess(count: int) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-c", ATTACH_AND_WAIT]
    return [
        subprocess.Popen(command, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(count)
    ]


def finish(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.wait(timeout=15)
        process.stdout.close()


def test_processes_started_at_once_share_one_server(home: Path) -> None:
    users = attach_in_subprocess(3)
    try:
        urls = {p.stdout.readline().strip() for p in users}  # type: ignore[union-attr]
        assert len(urls) == 1, f"each process got its own server: {urls}"
        (url,) = urls
        members = redis.Redis.from_url(url).smembers("users")
        assert {int(m) for m in members} == {p.pid for p in users}
        assert len(processes_of(home)) == 2, "expected one keeper and one Valkey"
        assert shared.server_status(home)[1] == 3, "three leases held"
    finally:
        finish(users)
    wait_until(lambda: not processes_of(home), what="the last user to stop the server")
    assert not Paths(home).info.exists()


def test_the_server_keeps_its_data_and_port_across_restarts(home: Path) -> None:
    with shared.SharedServer(home) as first:
        redis.Redis.from_url(first.url).set("kept", "yes")
        port, pid = first.info.port, first.info.pid  # type: ignore[union-attr]
        assert first.started_here
    assert not pid_alive(pid), "the last user left: the server must be stopped"
    with shared.SharedServer(home) as second:
        assert second.info is not None and second.info.pid != pid
        assert second.info.port == port, "restarted on the port its users know"
        assert redis.Redis.from_url(second.url).get("kept") == b"yes"


def test_a_sigkilled_last_user_does_not_leave_the_server_running(home: Path) -> None:
    (user,) = attach_in_subprocess(1)
    assert user.stdout is not None and user.stdin is not None
    url = user.stdout.readline().strip()
    assert redis.Redis.from_url(url).ping()
    user.kill()
    user.wait()
    user.stdin.close()
    user.stdout.close()
    wait_until(lambda: not processes_of(home), timeout=5, what="the keeper to notice")


def test_a_crashed_user_does_not_stop_the_server_for_the_others(home: Path) -> None:
    survivor = shared.SharedServer(home)
    url = survivor.attach()
    (crashed,) = attach_in_subprocess(1)
    assert crashed.stdout is not None and crashed.stdin is not None
    assert crashed.stdout.readline().strip() == url
    crashed.kill()
    crashed.wait()
    crashed.stdin.close()
    crashed.stdout.close()
    leases = Paths(home).users
    wait_until(lambda: len(list(leases.glob("*.lease"))) == 1, what="the keeper to reap the lease")
    assert redis.Redis.from_url(url).ping(), "the server went with a user that still had company"
    survivor.release()
    wait_until(lambda: not processes_of(home), what="the server to stop")


def test_a_crashed_keeper_is_replaced_with_the_same_data(home: Path) -> None:
    user = shared.SharedServer(home)
    url = user.attach()
    redis.Redis.from_url(url).set("kept", "1")
    info = user.info
    assert info is not None
    os.kill(info.keeper_pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(info.pid), what="Valkey to follow its keeper")
    assert user.attach() == url, "a new keeper on the same port"
    assert user.info is not None and user.info.keeper_pid != info.keeper_pid
    assert redis.Redis.from_url(url).get("kept") == b"1"
    user.release()


def test_a_crashed_valkey_is_restarted_by_its_keeper(home: Path) -> None:
    with shared.SharedServer(home) as user:
        info = user.info
        assert info is not None
        os.kill(info.pid, signal.SIGKILL)
        wait_until(lambda: server_pid(info.port) not in (None, info.pid), what="Valkey restarted")
        assert redis.Redis.from_url(user.url).ping()


def test_queue_publisher_and_cli_share_it_and_it_is_logged_once(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamq.server.shared")
    mq = MessageQueue(stream="shared-default", group="g")
    with Publisher(stream="shared-default") as publisher:
        assert publisher.url == mq.url
        publisher.publish("x", 1)
    announced = [r.getMessage() for r in caplog.records if "shared embedded server" in r.message]
    assert len(announced) == 1, announced
    assert mq.url in announced[0] and str(home / "data") in announced[0]
    cli = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "info", "shared-default", "--json"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert '"length": 1' in cli.stdout


def test_server_command_attaches_and_stop_stops_it(home: Path) -> None:
    url = shared.SharedServer(home).attach()  # kept attached: the command must reuse it
    server = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "server"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == url
        status = subprocess.run(
            [sys.executable, "-m", "streamq.cli", "server", "status"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert status.returncode == 0 and url in status.stdout and "users: 2" in status.stdout
        stop = subprocess.run(
            [sys.executable, "-m", "streamq.cli", "server", "stop"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert stop.returncode == 0, stop.stderr
        assert "stopped" in stop.stdout
        assert not processes_of(home)
        server.terminate()
        assert server.wait(timeout=10) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()  # type: ignore[union-attr]
        server.stderr.close()  # type: ignore[union-attr]
    again = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "server", "stop"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert again.returncode == 1 and "not running" in again.stderr
