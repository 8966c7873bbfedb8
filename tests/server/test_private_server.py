"""A private embedded server (EmbeddedServer, EmbeddedCluster, EmbeddedSentinel) runs in
its own session, so a Ctrl-C meant for its parent's process group does not reach it, and
it dies with its parent, SIGKILL included, even when a thread that has ended started it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

pytestmark = pytest.mark.slow

PARENT = textwrap.dedent(
    """
    import signal, sys, threading, time
    from streamq.server import EmbeddedCluster, EmbeddedServer, EmbeddedSentinel

    signal.signal(signal.SIGINT, lambda *_: print("sigint", flush=True))
    make = {
        "single": EmbeddedServer,
        "cluster": lambda: EmbeddedCluster(masters=1),
        "sentinel": lambda: EmbeddedSentinel(replicas=0, sentinels=1),
    }[sys.argv[1]]
    servers = []
    # started by a thread that ends at once: the servers must live on
    starter = threading.Thread(target=lambda: servers.append(make().start()))
    starter.start()
    starter.join()
    print("ready" if servers else "failed", flush=True)
    time.sleep(120)
    """
)


@pytest.fixture
def parent_of(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """A Python process (in its own process group) that started a private server of the
    kind given as the parameter and sleeps; killed, with its servers, afterwards."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, request.param],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    servers: list[psutil.Process] = []
    try:
        assert read_line(parent, timeout=30) == "ready"
        servers = psutil.Process(parent.pid).children()
        assert servers, "the parent has no server process"
        yield parent
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
        for server in servers:  # what a failed test left behind
            if server.is_running():
                server.kill()


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no line from the parent within {timeout} s"
    return process.stdout.readline().strip()


def alive(server: psutil.Process) -> bool:
    try:
        return server.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_within(servers: list[psutil.Process], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(s) for s in servers):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("parent_of", ["single", "cluster", "sentinel"], indirect=True)
def test_a_private_server_dies_with_its_sigkilled_parent(
    parent_of: subprocess.Popen[str],
) -> None:
    servers = psutil.Process(parent_of.pid).children()
    time.sleep(0.5)  # the thread that started them has ended: they live on
    assert all(alive(s) for s in servers), "a server died with the thread that started it"
    parent_of.send_signal(signal.SIGKILL)
    assert gone_within(servers, seconds=5), "the server outlived its SIGKILLed parent"


@pytest.mark.parametrize("parent_of", ["single"], indirect=True)
def test_sigint_to_the_parents_process_group_does_not_reach_the_server(
    parent_of: subprocess.Popen[str],
) -> None:
    (server,) = psutil.Process(parent_of.pid).children()
    assert os.getpgid(server.pid) != os.getpgid(parent_of.pid)
    os.killpg(parent_of.pid, signal.SIGINT)  # what Ctrl-C in the parent's terminal does
    assert read_line(parent_of, timeout=5) == "sigint"
    time.sleep(1.0)
    assert alive(server), "the server took the parent's Ctrl-C"
