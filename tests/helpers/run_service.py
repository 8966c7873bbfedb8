"""The service that tests/run/test_run.py runs with `streamq run` (SERVICE: a jobs queue
whose handler can be held, a crashing type, an events queue), the Service process that
runs it, with its health and metrics endpoints, and what the tests read of its work."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from streamq.server import free_port

SERVICE = textwrap.dedent(
    """
    import logging
    import os

    import anyio
    from streamq import App, Message, MessageQueue, RetryPolicy, StartFrom
    from streamq.wire.client import connect

    VERSION = "v1"
    STREAM = os.environ["TEST_STREAM"]
    # the test's own keys carry the stream's hash tag: one slot, one client on a cluster too
    HOLD, HANDLED, EVENTS = (f"{{{STREAM}}}:{name}" for name in ("hold", "handled", "events"))
    # at most 2 jobs in hand per worker: held jobs reach both workers, whichever reads first
    jobs = MessageQueue(stream=STREAM, group="workers", consumer="svc", start=StartFrom.EARLIEST,
                        claim_idle=60, block=0.2, grace=10, read_count=2, max_in_flight=2, concurrency=2,
                        retry=RetryPolicy(attempts=1, max_deliveries=2))
    events = MessageQueue(stream=STREAM + "-events", group="audit", consumer="svc",
                          start=StartFrom.EARLIEST, block=0.2)
    log = logging.getLogger("svc")
    _client = []


    def r():
        if not _client:
            _client.append(connect(jobs.url).client_for(STREAM))
        return _client[0]


    @jobs.handler("job")
    async def job(msg: Message[int]) -> None:
        while await r().exists(HOLD):
            await anyio.sleep(0.05)
        log.info("job %s", msg.data)
        await r().hset(HANDLED, msg.id, f"{jobs.consumer} {VERSION}")


    @jobs.handler("crash")
    async def crash(msg: Message[int]) -> None:
        os._exit(3)


    @events.handler("event")
    async def event(msg: Message[int]) -> None:
        await r().hset(EVENTS, msg.id, events.consumer)


    app = App(jobs, events)
    """
)


class Service:
    """A `streamq run` of SERVICE in ``directory``, with its ports and log file."""

    def __init__(self, directory: Path, env: dict[str, str], *options: str) -> None:
        self.directory, self.health, self.metrics = directory, free_port(), free_port()
        (directory / "service.py").write_text(SERVICE)
        self.log_path = directory / "run.log"
        self.stream = env["TEST_STREAM"]
        command = [
            sys.executable, "-m", "streamq.cli", "run", "service:app",
            "--health-port", str(self.health), "--metrics-port", str(self.metrics), *options,
        ]  # fmt: skip
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                command, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        url = f"http://127.0.0.1:{port or self.health}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def readiness(self) -> dict[str, Any]:
        _, body = self.get("/readyz")
        return json.loads(body) if body else {"ready": False, "workers": []}

    def worker(self, slot: int) -> dict[str, Any]:
        workers = self.readiness()["workers"]
        return workers[slot] if len(workers) > slot else {}

    def logs(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        """Drain (SIGTERM), as a service manager stops it; kill only if that hangs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


KEYS = ("hold", "handled", "events")


def key(stream: str, name: str) -> str:
    """The service's own key ``name`` (SERVICE: HOLD, HANDLED, EVENTS): in the stream's slot."""
    return f"{{{stream}}}:{name}"


def pending_of(client: redis.Redis, stream: str) -> dict[str, int]:
    summary = client.xpending(stream, "workers")
    names = (c["name"] for c in summary["consumers"] or [])
    counts = (int(c["pending"]) for c in summary["consumers"] or [])
    return {
        n.decode() if isinstance(n, bytes) else n: c for n, c in zip(names, counts, strict=True)
    }
