"""Helpers of the embedded servers' tests (EmbeddedCluster, EmbeddedSentinel): their
processes' PIDs, that those end, what `streamq server` refuses, and the plugin fixtures
taking their URL from the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable

import pytest
import redis


def server_pids(urls: Iterable[str]) -> list[int]:
    """The process ID of the server at each of ``urls``, as the server says."""
    pids = []
    for url in urls:
        with redis.Redis.from_url(url) as client:
            pids.append(int(client.info("server")["process_id"]))
    return pids


def local_urls(ports: Iterable[int]) -> list[str]:
    return [f"redis://127.0.0.1:{port}" for port in ports]


def exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def all_gone(pids: list[int], within: float = 5.0) -> bool:
    """Whether every one of ``pids`` has ended, waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while any(exists(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def assert_end_with_their_parent(script: str, count: int) -> None:
    """Run the Python ``script``, which starts servers, prints the PID of each of their
    ``count`` processes and exits without stopping them: every one must end with it
    (any left over is killed afterwards)."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    pids = [int(line) for line in result.stdout.split()]
    try:
        assert result.returncode == 0 and len(pids) == count, result.stderr
        assert all_gone(pids), "a process outlived its parent"
    finally:
        for pid in pids:
            if exists(pid):
                os.kill(pid, signal.SIGKILL)


def assert_server_command_refuses(args: tuple[str, ...], message: str) -> None:
    """`streamq server ARGS` exits with status 2, saying ``message``."""
    result = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "server", *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def assert_fixture_takes_url_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str, url: str
) -> None:
    """The plugin's fixture named as ``variable`` in lower case (``streamq_cluster_url``)
    is ``url`` when the environment variable ``variable`` holds it (a made-up URL:
    nothing is started, nothing connects)."""
    fixture = variable.lower()
    pytester.makeconftest("")
    pytester.makepyfile(
        f"""
        def test_url({fixture}):
            assert {fixture} == {url!r}
        """
    )
    monkeypatch.setenv(variable, url)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
