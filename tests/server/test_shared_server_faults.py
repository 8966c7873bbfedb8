"""Issue 27, items 2-4: the shared embedded server on day two. It is ready only once its
data is loaded (and every client waits for a server answering ``LOADING``); it survives a
SIGKILL of its keeper under running users (same port, restarted by the next user that
notices, clients reconnect by themselves); a server command that cannot have the port it
was asked for says so and fails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from streamq import MessageQueue, Publisher
from streamq.server import EmbeddedServer, shared
from streamq.server.keeper import Paths, pid_alive, read_info, server_state
from streamq.server.shared_start import ServerInfo
from tests.helpers.processes import processes_of
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # the big data takes ~20 s to make

BIG = 400_000  # entries: the data takes ~2 s to load, long enough to be caught loading

# A user started right after the server: publishes one message to its own stream (argv),
# consumes it, says "ok".
USER = textwrap.dedent(
    """
    import sys
    import anyio
    from streamq import Message, MessageQueue, StartFrom
    mq = MessageQueue(stream=sys.argv[1], group="g", consumer="c1", start=StartFrom.EARLIEST)
    @mq.handler("hello")
    async def hello(msg: Message[str]) -> None:
        print("ok", msg.data, flush=True)
        await mq.stop()
    async def main() -> None:
        async with mq:
            await mq.publish("hello", "world")
            await mq.run()
    anyio.run(main)
    """
)

# Publishes 0, 1, 2, ... (each until acknowledged), prints each acknowledged number.
PUBLISHER = textwrap.dedent(
    """
    import time
    from streamq import Publisher, StreamqError
    with Publisher(stream="kept") as publisher:
        n = 0
        while True:
            try:
                publisher.publish("n", n)
            except StreamqError:
                time.sleep(0.1)
                continue
            print(n, flush=True)
            n += 1
            time.sleep(0.02)
    """
)

# Consumes the stream above and prints every number it handled.
CONSUMER = textwrap.dedent(
    """
    import anyio
    from streamq import Message, MessageQueue, StartFrom
    mq = MessageQueue(stream="kept", group="g", consumer="c1", start=StartFrom.EARLIEST)
    @mq.handler("n")
    async def handle(msg: Message[int]) -> None:
        print(msg.data, flush=True)
    anyio.run(mq.run)
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
    shared.stop_server(state)
    wait_until(lambda: not processes_of(state), what="the shared server to stop")


@pytest.fixture(scope="module")
def big_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared server's data directory holding BIG entries (as commands in its AOF, as a
    few days of demos and tests leave it), made once and copied into each test's home."""
    state = tmp_path_factory.mktemp("big") / "home"
    with shared.SharedServer(state) as server:
        client = redis.Redis.from_url(server.url)
        pipe = client.pipeline(transaction=False)
        for i in range(BIG):
            pipe.xadd("big", {"type": "n", "data": str(i)})
            if i % 10_000 == 9_999:
                pipe.execute()
        pipe.execute()
        assert client.xlen("big") == BIG
    return Paths(state).data


def with_big_data(home: Path, big_data: Path) -> None:
    Paths(home).create()
    shutil.rmtree(Paths(home).data)
    shutil.copytree(big_data, Paths(home).data)


def loading(port: int) -> bool:
    return server_state(port)[1]


def run_user(timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", USER, "first"], capture_output=True, text=True, timeout=timeout
    )


# -- 2. ready means loaded --------------------------------------------------------------


def test_a_user_started_with_the_server_waits_until_its_data_is_loaded(
    home: Path, big_data: Path
) -> None:
    with_big_data(home, big_data)
    user = run_user()  # starts the server itself, and uses it at once
    assert user.returncode == 0, user.stderr[-2000:]
    assert "ok world" in user.stdout


def test_users_arriving_while_it_loads_wait_for_it(home: Path, big_data: Path) -> None:
    with_big_data(home, big_data)
    users = [subprocess.Popen([sys.executable, "-c", USER, f"user-{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]  # fmt: skip
    for user in users:
        out, err = user.communicate(timeout=90)
        assert user.returncode == 0, err[-2000:]
        assert "ok world" in out


def test_clients_wait_for_a_server_that_is_loading(home: Path, big_data: Path) -> None:
    """The keeper restarts a crashed Valkey, which loads its data: a publish (of a queue,
    of a blocking Publisher), a topic operation and an open that meet ``LOADING`` wait for
    it instead of failing."""
    with_big_data(home, big_data)
    with shared.SharedServer(home) as server:
        info = server.info
        assert info is not None
        os.kill(info.pid, signal.SIGKILL)  # the keeper starts it again: it loads its data
        wait_until(lambda: loading(info.port), timeout=15, what="Valkey loading")
        queues = [MessageQueue(server.url, stream="first", group="g") for _ in range(3)]
        results: dict[str, object] = {}

        async def publish() -> None:
            results["published"] = await queues[0].publish("hello", "world")

        async def topic_info() -> None:
            results["info"] = await queues[1].topic_info()

        async def open_queue() -> None:
            await queues[2].open()
            results["opened"] = True

        def publish_blocking() -> None:
            with Publisher(server.url, stream="first") as publisher:
                results["published blocking"] = publisher.publish("hello", "again")

        async def all_at_once() -> None:
            async with anyio.create_task_group() as tg:
                for job in (publish, topic_info, open_queue):
                    tg.start_soon(job)
                tg.start_soon(anyio.to_thread.run_sync, publish_blocking)
            for mq in queues:
                await mq.aclose()

        anyio.run(all_at_once)
        assert set(results) == {"published", "info", "opened", "published blocking"}
        assert not loading(info.port)


# -- 3. the keeper's death strands nobody ----------------------------------------------


class Running:
    """A subprocess printing one number per line; the numbers seen so far."""

    def __init__(self, script: str, log: Path) -> None:
        self.log = log
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT
            )

    def numbers(self) -> set[int]:
        return {int(line) for line in self.log.read_text().splitlines() if line.isdigit()}

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.log.read_text()[-3000:]


@pytest.fixture
def traffic(home: Path, tmp_path: Path) -> Iterator[tuple[Running, Running]]:
    """A publisher and a consumer in their own processes, on the shared server of ``home``
    (started by the first of them); both already at work."""
    publisher = Running(PUBLISHER, tmp_path / "publisher.log")
    consumer = Running(CONSUMER, tmp_path / "consumer.log")
    try:
        wait_until(lambda: len(consumer.numbers()) >= 20, timeout=60, what="traffic")
        yield publisher, consumer
    finally:
        publisher.stop()
        consumer.stop()


def goes_on(publisher: Running, consumer: Running, within: float = 30.0) -> None:
    """Both publish and consume again, and nothing acknowledged is lost."""
    published = max(publisher.numbers())
    wait_until(lambda: max(publisher.numbers()) >= published + 20, timeout=within,
               what="the publisher to go on")  # fmt: skip
    target = publisher.numbers()
    wait_until(lambda: target <= consumer.numbers(), timeout=within,
               what=f"the consumer to handle all of {len(target)} published")  # fmt: skip


def test_running_users_survive_a_sigkilled_keeper(
    home: Path, traffic: tuple[Running, Running]
) -> None:
    before = ServerInfo(**{k: v for k, v in _info(home).items() if k != "started_at"})
    os.kill(before.keeper_pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(before.pid), what="Valkey to follow its keeper")
    goes_on(*traffic)
    after = _info(home)
    assert after["port"] == before.port, "restarted on the port its users know"
    assert after["keeper_pid"] != before.keeper_pid


def test_a_running_publisher_goes_on_after_server_stop_and_a_restart(
    home: Path, traffic: tuple[Running, Running]
) -> None:
    port = _info(home)["port"]
    assert shared.stop_server(home) is not None
    time.sleep(1.0)  # its users do not start it again: it was stopped on purpose
    assert server_state(port)[0] is None, "a running user started a stopped server again"
    with shared.SharedServer(home) as again:  # someone starts it again
        assert again.info is not None and again.info.port == port
        goes_on(*traffic)


def _info(home: Path) -> dict[str, Any]:
    wait_until(lambda: read_info(Paths(home)) is not None, what="server.json")
    info = read_info(Paths(home))
    assert info is not None
    return info


# -- 4. a port that cannot be had is an error -----------------------------------------


def server_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamq.cli", "server", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_private_server_on_a_taken_port_fails(home: Path) -> None:
    with EmbeddedServer() as other:
        result = server_command("--private", "--port", str(other.port))
    assert result.returncode != 0
    assert result.stdout == "", "printed a URL it does not own"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(other.port) in lines[0] and "in use" in lines[0], lines


def test_the_shared_server_command_says_it_runs_on_another_port(home: Path) -> None:
    with shared.SharedServer(home) as server, EmbeddedServer() as other:
        assert server.info is not None
        wanted = other.port + 1 if other.port + 1 != server.info.port else other.port + 2
        result = server_command("--port", str(wanted))
        assert result.returncode != 0 and result.stdout == ""
        assert f"runs on port {server.info.port}" in result.stderr
        taken = server_command("stop")
        assert taken.returncode == 0
        result = server_command("--port", str(other.port))  # taken by another server
        assert result.returncode != 0 and result.stdout == ""
        assert f"port {other.port} is taken" in result.stderr
