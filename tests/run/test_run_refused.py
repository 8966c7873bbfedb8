"""`streamq run` whose workers cannot start because the server refuses their credentials: a
configuration error, so the run ends at once (exit 2, one line), no worker restarted."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

SERVICE = """
from streamq import Message, MessageQueue
mq = MessageQueue(stream="run-refused", group="g")
@mq.handler("t")
async def t(msg: Message[dict]) -> None: ...
"""
PASSWORD = "NotThePassw0rd"


@pytest.mark.parametrize("workers", ["1", "3"])
def test_refused_credentials_end_the_run_with_exit_2(
    redis_url: str, tmp_path: Path, workers: str
) -> None:
    (tmp_path / "svc.py").write_text(SERVICE)
    user = f"nobody-{uuid.uuid4().hex[:8]}"  # no such user: the server refuses its AUTH
    url = redis_url.replace("redis://", f"redis://{user}:{PASSWORD}@")
    result = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "run", "svc:mq", "--url", url,
         "--workers", workers, "--health-port", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    logs = result.stderr + result.stdout
    assert result.returncode == 2, logs
    assert "restarting it" not in logs and "Traceback" not in logs, logs
    assert PASSWORD not in logs
    said = [line for line in logs.splitlines() if "refused the credentials" in line]
    assert len(said) == 1 and "cannot run svc:mq (the server refused" in said[0], logs
