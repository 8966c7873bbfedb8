"""Issue 27.5: a worker of `streamq run` never outlives its supervisor, also when the
supervisor dies while it starts the worker (the worker finds itself orphaned at once) or
while the worker is still connecting to a server that does not answer."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamq.server.keeper import pid_alive
from streamq.testing import delete_stream_keys
from tests.helpers.run_service import KEYS, SERVICE, key, wait_until

# Starts slot 0's worker exactly as the supervisor does (its command, its own session),
# prints the worker's pid, then dies at once ("exit") or waits to be killed ("wait").
SPAWNER = textwrap.dedent(
    """
    import os, shutil, subprocess, sys
    from streamq.run.supervisor import RunOptions, Supervisor

    supervisor = Supervisor(RunOptions(sys.argv[1], app_dir=sys.argv[2]))
    shutil.rmtree(supervisor.run_dir)  # the worker's status file then fails quietly
    worker = subprocess.Popen(supervisor._command(supervisor.slots[0]), start_new_session=True)
    print(worker.pid, flush=True)
    if sys.argv[3] == "exit":
        os._exit(0)  # as a SIGKILL: no cleanup, the worker is orphaned while it starts
    sys.stdin.read()
    """
)


@pytest.fixture
def service_dir(tmp_path: Path, redis_url: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """SERVICE in ``tmp_path`` and its environment (a fresh stream on the session server)."""
    stream = f"test-orphan-{uuid.uuid4().hex[:10]}"
    (tmp_path / "service.py").write_text(SERVICE)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env.update(TEST_STREAM=stream, STREAMQ_HOME=str(tmp_path / "home"), STREAMQ_REDIS_URL=redis_url)
    yield tmp_path, env
    for name in (stream, f"{stream}-events", *(key(stream, k) for k in KEYS)):
        delete_stream_keys(redis_url, name)


def spawn(directory: Path, env: dict[str, str], mode: str) -> tuple[subprocess.Popen[str], int]:
    """The spawner (the worker's supervisor) and its worker's pid."""
    with open(directory / "worker.log", "w") as log:
        spawner = subprocess.Popen(
            [sys.executable, "-c", SPAWNER, "service:app", str(directory), mode],
            cwd=directory, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, text=True,
        )  # fmt: skip
    assert spawner.stdout is not None
    return spawner, int(spawner.stdout.readline())


def end(spawner: subprocess.Popen[str], worker: int) -> None:
    """Leave nothing running, whatever the test found."""
    if pid_alive(worker):
        os.kill(worker, signal.SIGKILL)
    if spawner.poll() is None:
        spawner.kill()
    spawner.wait()
    for pipe in (spawner.stdin, spawner.stdout):
        if pipe is not None:
            pipe.close()


@pytest.mark.slow
def test_a_worker_whose_supervisor_died_while_starting_it_exits(
    service_dir: tuple[Path, dict[str, str]],
) -> None:
    directory, env = service_dir
    spawner, worker = spawn(directory, env, "exit")
    try:
        assert spawner.wait(timeout=10) == 0
        wait_until(lambda: not pid_alive(worker), timeout=10,
                   what="the orphaned worker to exit by itself")  # fmt: skip
    finally:
        end(spawner, worker)


@pytest.mark.slow
def test_a_worker_still_connecting_exits_when_its_supervisor_is_killed(
    service_dir: tuple[Path, dict[str, str]],
) -> None:
    directory, env = service_dir
    with socket.socket() as silent:  # accepts connections, never answers: connecting hangs
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        env = {**env, "STREAMQ_REDIS_URL": f"redis://127.0.0.1:{silent.getsockname()[1]}/0"}
        spawner, worker = spawn(directory, env, "wait")
        connection: socket.socket | None = None
        try:
            silent.settimeout(20)
            connection, _ = silent.accept()  # the worker is connecting, waiting for a reply
            spawner.kill()
            spawner.wait()
            wait_until(lambda: not pid_alive(worker), timeout=4,
                       what="the connecting worker to exit once its supervisor is gone")  # fmt: skip
        finally:
            end(spawner, worker)
            if connection is not None:
                connection.close()
