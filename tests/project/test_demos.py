"""Every demo runs to completion by itself (as `make demo-*` runs it) and says what it showed,
and leaves nothing on the server it used: not when it ends, not when it is interrupted."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from demos.postgres import postgres_bin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

DEMOS = {
    "main": [
        "emails sent: 2; orders handled: 6",
        "dead letter",
        "subject: Field required",  # past the old 90-character cut of the reason
        "pending: 0",
    ],
    "batch": ["batch sizes seen: [5, 5, 2]"],
    "start_position": ["LATEST          -> []", "EARLIEST        -> [1, 2, 3, 4, 5]"],
    "auto_stop": [
        "automatic stop, reason 'group_deleted'",
        "reason 'stream_deleted'",
        "reason 'topic_terminated'",
        "manual stop, reason 'stopped'",
    ],
    "stop_message": ["billing saw [1, 3, 2], audit saw [1, 3, 2]"],
    "cleanup": ["cleanup removed 40", "removed 50 more, length 10"],
    "cluster": [  # its own embedded cluster (3 masters, 3 replicas), whatever the URL
        "6 partitions per node",
        "took over its slots",
        "restarted, now a replica",
        "nothing lost: every published order handled; per-key order kept",
    ],
    "microservice": [
        "sync view published 3 emails",
        "'consuming': True",
        "streamq_handled_total",
        "service stopped: stopped; 3 emails sent",
    ],
    "exactly_once": [  # its own PostgreSQL; on a cluster URL too (receipts via the outbox)
        "SIGKILL worker-",
        "exactly once: each of the",
        "PostgreSQL stopped and removed",
    ],
}
NEEDS_POSTGRES = {"exactly_once"}
SHORT_RUN = {"exactly_once": ["--seconds", "3"]}  # a demo's options for a shorter run
# seconds a demo may take: the ledger starts a database and restarts worker processes,
# slow on a loaded machine
TIMEOUTS = {"exactly_once": 120}


def skip_without_postgres(name: str) -> None:
    if name in NEEDS_POSTGRES and postgres_bin() is None:
        pytest.skip(f"demo {name} needs Debian's postgresql (make postgres-deps installs it)")


def postgres_stopped(output: str) -> None:
    """The PostgreSQL a demo said it started no longer listens."""
    for port in re.findall(r"PostgreSQL \d+ on port (\d+)", output):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(port))) != 0, f"PostgreSQL left on :{port}"


def demo_keys(url: str) -> set[bytes]:
    """The keys on the server whose names say a demo made them (every demo's streams are
    named ``demo-...``; streamq's keys for them ``streamq:{demo-...}:...``)."""
    with redis.Redis.from_url(url) as client:
        return set(client.scan_iter(match="*demo-*", count=1000))


def demo_params() -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.timeout(TIMEOUTS.get(name, 60) + 30))
            for name in sorted(DEMOS)]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", demo_params())
def test_demo_runs_and_exits_zero(name: str, redis_url: str) -> None:
    skip_without_postgres(name)
    env = {**os.environ, "STREAMQ_REDIS_URL": redis_url}
    before = demo_keys(redis_url)
    result = subprocess.run(
        [sys.executable, "-m", f"demos.{name}", *SHORT_RUN.get(name, [])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUTS.get(name, 60),
    )  # fmt: skip
    assert result.returncode == 0, f"demo {name} failed:\n{result.stdout}\n{result.stderr}"
    for expected in DEMOS[name]:
        assert expected in result.stdout, (
            f"demo {name} did not print {expected!r}:\n{result.stdout}"
        )
    assert demo_keys(redis_url) - before == set(), f"demo {name} left keys on the server"
    postgres_stopped(result.stdout)


INTERRUPTED = [  # a long demo, its options, a line it prints while busy, the signal
    ("dashboard", ["--seconds", "600", "--port", "0"], "open http", signal.SIGTERM),
    ("service", [], "SIGKILL worker 0", signal.SIGINT),
    ("service", [], "worker 0 (pid", signal.SIGTERM),
    ("exactly_once", ["--seconds", "60"], "SIGKILL worker-", signal.SIGINT),
    ("exactly_once", ["--seconds", "60"], "a temporary folder of its own", signal.SIGTERM),
]


@pytest.mark.slow
@pytest.mark.timeout(150)  # a demo started, interrupted and cleaned up under a loaded machine
@pytest.mark.parametrize(("name", "options", "busy", "signum"), INTERRUPTED)
def test_an_interrupted_demo_leaves_nothing_behind(
    name: str, options: list[str], busy: str, signum: signal.Signals, redis_url: str,
    on_cluster: bool,
) -> None:  # fmt: skip
    if name == "service" and on_cluster:
        pytest.skip("the service demo is single-node: it and its handlers keep their "
                    "records in Redis through plain clients")  # fmt: skip
    skip_without_postgres(name)
    env = {**os.environ, "STREAMQ_REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    before = demo_keys(redis_url)
    demo = subprocess.Popen(
        [sys.executable, "-m", f"demos.{name}", *options],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert demo.stdout is not None
    seen = []
    try:
        for line in demo.stdout:  # the demo is under way, its topics made
            seen.append(line)
            if busy in line:
                break
        # go on reading, as a terminal does: a full pipe would block the demo's clean-up
        drain = threading.Thread(target=seen.extend, args=(demo.stdout,), daemon=True)
        drain.start()
        demo.send_signal(signum)
        demo.wait(timeout=60)
        drain.join(timeout=10)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        demo.stdout.close()
    assert busy in "".join(seen), "".join(seen)
    assert demo_keys(redis_url) - before == set(), f"interrupted demo {name} left keys"
    postgres_stopped("".join(seen))


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_pipeline_demo(redis_url: str) -> None:
    pytest.importorskip("pyspark", reason="the pipeline demo needs the [spark] extra")
    env = {**os.environ, "STREAMQ_REDIS_URL": redis_url}
    before = demo_keys(redis_url)
    result = subprocess.run(
        [sys.executable, "-m", "demos.pipeline"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=220,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"pipeline demo failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    )
    out = result.stdout
    assert "2. Spark archived 10 entries" in out, out
    assert "3. cleanup removed 10 of 10 entries" in out, out
    assert "ada  3 orders, total 90.00" in out, out
    assert "done: 4 emails sent (3 follow-ups)" in out, out
    assert demo_keys(redis_url) - before == set(), "the pipeline demo left keys"


class _InterruptedWhileStarting(subprocess.Popen[bytes]):
    """A child whose start is interrupted by SIGTERM after the fork, as a busy machine
    interrupts a demo that is starting its publisher process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_child_started_during_an_interrupt_is_ended_before_the_clean_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from demos import _common

    previous = signal.signal(signal.SIGTERM, _common._interrupt)
    monkeypatch.setattr(subprocess, "Popen", _InterruptedWhileStarting)  # as _common sees it
    try:
        with pytest.raises(KeyboardInterrupt):  # raised once the child is recorded
            _common.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
        assert len(_common.CHILDREN) == 1, "the interrupted start lost the child's handle"
        child = _common.CHILDREN[0]
        assert child.poll() is None
        _common.end_children(timeout=5)
        assert child.returncode == -signal.SIGTERM, "the child outlived the demo's clean-up"
        assert _common.CHILDREN == []
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in _common.CHILDREN:
            child.kill()
            child.wait()
        _common.CHILDREN.clear()
