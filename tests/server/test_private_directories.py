"""A private embedded server's temporary directory is removed when it closes; one whose
owner was SIGKILLed is removed by the next private server that starts and at the end of a
test session; a server that never started leaves none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamq import EmbeddedCluster, EmbeddedSentinel, EmbeddedServer
from streamq.server.directories import make_private_directory, remove_orphaned

OWNER = textwrap.dedent(
    """
    import sys, time
    from streamq.server import EmbeddedCluster, EmbeddedServer, EmbeddedSentinel

    make = {
        "single": EmbeddedServer,
        "cluster": lambda: EmbeddedCluster(masters=1),
        "sentinel": lambda: EmbeddedSentinel(replicas=0, sentinels=1),
    }[sys.argv[1]]
    make().start()
    print("ready", flush=True)
    time.sleep(120)
    """
)


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of this test's own, for this process and its children."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def server_dirs(parent: Path) -> list[Path]:
    return sorted(p for p in parent.iterdir() if p.name.startswith("streamq-"))


@pytest.fixture
def owner(request: pytest.FixtureRequest, temp_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that started a private server of the kind given as the parameter (its
    directory in ``temp_dir``) and sleeps; killed afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, request.param], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def test_a_server_that_never_started_leaves_no_directory(temp_dir: Path) -> None:
    EmbeddedServer()
    EmbeddedCluster(masters=1)
    EmbeddedSentinel()
    assert server_dirs(temp_dir) == []


def a_dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_directories_of_dead_owners_of_this_pid_namespace_are_removed(
    temp_dir: Path,
) -> None:
    mine = make_private_directory("valkey")
    _, _kind, pid, start, namespace, _random = mine.name.split("-")
    dead = a_dead_pid()
    orphan = temp_dir / f"streamq-cluster-{dead}-{start}-{namespace}-x"
    reused = temp_dir / f"streamq-sentinel-{pid}-{int(start) + 1}-{namespace}-x"  # PID reused
    elsewhere = temp_dir / f"streamq-valkey-{dead}-{start}-{int(namespace) + 1}-x"
    unnamed = temp_dir / "streamq-valkey-abc"  # not named by streamq's rule: not judged
    for directory in (orphan, reused, elsewhere, unnamed):
        directory.mkdir()
    assert sorted(remove_orphaned()) == sorted([orphan, reused])
    assert server_dirs(temp_dir) == sorted([mine, elsewhere, unnamed])


def test_close_removes_the_directory_and_a_restart_keeps_it(temp_dir: Path) -> None:
    server = EmbeddedServer(appendonly=True).start()
    (directory,) = server_dirs(temp_dir)
    server.restart()
    assert server_dirs(temp_dir) == [directory]
    server.close()
    assert server_dirs(temp_dir) == []


@pytest.mark.slow
@pytest.mark.parametrize("owner", ["single", "cluster", "sentinel"], indirect=True)
def test_the_directory_of_a_sigkilled_owner_is_removed_by_the_next_server(
    owner: subprocess.Popen[str], temp_dir: Path
) -> None:
    (orphan,) = server_dirs(temp_dir)
    assert remove_orphaned() == [], "the directory of a running owner was removed"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert orphan.exists()
    with EmbeddedServer() as server:
        assert server.running
        assert orphan not in server_dirs(temp_dir)
        assert len(server_dirs(temp_dir)) == 1  # its own
    assert server_dirs(temp_dir) == []


INNER_TEST = textwrap.dedent(
    """
    import subprocess, sys

    OWNER = {owner!r}

    def test_a_server_owner_is_sigkilled():
        process = subprocess.Popen(
            [sys.executable, "-c", OWNER, "single"], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout.readline().strip() == "ready"
        process.kill()
        process.wait()
        process.stdout.close()
    """
)


@pytest.mark.slow
def test_a_test_session_ends_leaving_no_server_directory(
    pytester: pytest.Pytester, temp_dir: Path
) -> None:
    pytester.makepyfile(INNER_TEST.format(owner=OWNER))
    env = {**os.environ, "TMPDIR": str(temp_dir)}
    env.pop("STREAMQ_REDIS_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pytester.path)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert server_dirs(temp_dir) == []
