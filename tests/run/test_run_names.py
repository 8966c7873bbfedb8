"""Two `streamq run` of one service on one host name their workers alike (`svc-0`, ...):
the second is refused in one line before starting a worker, a worker that races past
that check is refused when its queues open (exit 2, one line, no restart loop), and
`--name` gives a run names of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamq.testing import delete_stream_keys
from tests.helpers.run_service import KEYS, Service, key, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> Iterator[dict[str, str]]:
    stream = f"test-run-{uuid.uuid4().hex[:10]}"
    values = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    values.update(TEST_STREAM=stream, STREAMQ_HOME=str(tmp_path / "home"))
    values["STREAMQ_REDIS_URL"] = redis_url
    yield values
    for name in (stream, f"{stream}-events", *(key(stream, k) for k in KEYS)):
        delete_stream_keys(redis_url, name)


@pytest.fixture
def service(tmp_path: Path, env: dict[str, str]) -> Iterator[Service]:
    """`streamq run service:app --workers 2`, ready: consumers svc-0 and svc-1."""
    running = Service(tmp_path, env, "--workers", "2")
    try:
        wait_until(lambda: running.readiness()["ready"], what="the first run ready")
        yield running
    finally:
        running.stop()


def run(directory: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=directory, env=env, capture_output=True, text=True,
        timeout=40,
    )  # fmt: skip


def test_a_second_run_of_the_same_service_is_refused_in_one_line(
    tmp_path: Path, env: dict[str, str], service: Service
) -> None:
    second = run(tmp_path, env, "-m", "streamq.cli", "run", "service:app", "--workers", "2")
    output = second.stdout + second.stderr
    assert second.returncode == 2, output
    refusals = [line for line in output.splitlines() if "consumer names in use" in line]
    assert len(refusals) == 1, output
    for name in ("'svc-0' in group 'workers'", "'svc-1' in group 'workers'", "--name NAME"):
        assert name in refusals[0], refusals[0]
    assert "Traceback" not in output and "worker 0" not in output, "a worker was started"
    assert service.readiness()["ready"], "the first run was disturbed"


def test_a_worker_that_races_past_the_check_exits_on_one_line(
    tmp_path: Path, env: dict[str, str], service: Service
) -> None:
    """As a worker of a second run started at the same moment would (the supervisor's
    check saw nothing yet): refused when its queues open, exit 2 (not restarted)."""
    worker = run(tmp_path, env, "-m", "streamq.run.worker", "service:app", "--slot", "1",
                 "--supervisor", str(os.getpid()))  # fmt: skip
    output = worker.stdout + worker.stderr
    assert worker.returncode == 2, output
    assert "Traceback" not in output, output
    assert "consumer name 'svc-1' of group 'workers'" in output, output
    assert "another live process" in output and "--name NAME" in output, output
    assert service.readiness()["ready"], "the first run was disturbed"


def test_name_gives_a_run_names_of_its_own(
    tmp_path: Path, env: dict[str, str], service: Service
) -> None:
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = Service(other_dir, env, "--workers", "2", "--name", "blue")
    try:
        wait_until(lambda: other.readiness()["ready"], what="the run with --name ready")
        names = [w["queues"][0]["consumer"] for w in other.readiness()["workers"]]
        assert names == ["blue-0", "blue-1"]
        assert service.readiness()["ready"]
    finally:
        other.stop()
    assert other.process.returncode == 0, other.logs()
