"""`streamq dashboard` without a URL: it watches the shared embedded server when that runs,
as every other command does, and holds a lease on it while it runs, so the server is not
stopped under it when its other users leave."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.server import shared
from tests.helpers.processes import processes_of
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow


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


def start_dashboard(home: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"}
    env[shared.ENV_HOME] = str(home)
    return subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--port", "0", "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_dashboard_uses_the_shared_server_and_keeps_it_alive(home: Path) -> None:
    user = shared.SharedServer(home)
    url = user.attach()
    dashboard = start_dashboard(home)
    try:
        assert dashboard.stdout is not None
        address = dashboard.stdout.readline().strip()
        assert address.startswith("http://127.0.0.1:"), address or dashboard.communicate()[1]
        assert httpx.get(address).status_code == 200
        assert shared.server_status(home)[1] == 2, "the dashboard holds no lease on the server"
        user.release()  # the last user but the dashboard leaves: the server must stay
        assert shared.server_status(home)[0] is not None, "the server stopped under the dashboard"
        assert httpx.get(address).status_code == 200
        dashboard.terminate()
        _, err = dashboard.communicate(timeout=20)
        assert dashboard.returncode == 0, err
        assert f"streamq dashboard for {url}" in err
    finally:
        if dashboard.poll() is None:
            dashboard.kill()
            dashboard.communicate()
    wait_until(lambda: not processes_of(home), what="the server to stop with its last user")


def test_dashboard_without_a_server_says_how_to_get_one(home: Path) -> None:
    dashboard = start_dashboard(home)
    _, err = dashboard.communicate(timeout=60)
    assert dashboard.returncode == 2
    assert "no server" in err and "streamq server" in err, err
    assert not processes_of(home), "the dashboard started a server nobody asked for"
