"""Issue 15, `streamq run`: supervised workers with stable consumer names, restarts with
backoff, graceful drain on SIGTERM (a second signal exits at once), --reload, one health
and one metrics endpoint for all workers, JSON logs; and the target loader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from streamq import App, ConfigError, MessageQueue, Publisher
from streamq.run import assign_slot, load_target
from streamq.server import shared
from streamq.server.keeper import pid_alive
from streamq.testing import delete_stream_keys
from tests.helpers.clients import sync_client
from tests.helpers.processes import processes_of
from tests.helpers.run_service import KEYS, Service, key, pending_of, wait_until


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The service's environment: a fresh stream, a private $STREAMQ_HOME."""
    stream = f"test-run-{uuid.uuid4().hex[:10]}"
    values = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    values.update(TEST_STREAM=stream, STREAMQ_HOME=str(tmp_path / "home"))
    yield values
    if "STREAMQ_REDIS_URL" in values:
        for name in (stream, f"{stream}-events", *(key(stream, k) for k in KEYS)):
            delete_stream_keys(values["STREAMQ_REDIS_URL"], name)


@pytest.fixture
def session_env(env: dict[str, str], redis_url: str) -> dict[str, str]:
    return {**env, "STREAMQ_REDIS_URL": redis_url}


@pytest.fixture
def client(session_env: dict[str, str]) -> Iterator[redis.Redis]:
    """A raw client for the test stream's slot (its keys and the service's own)."""
    with sync_client(session_env["STREAMQ_REDIS_URL"], session_env["TEST_STREAM"]) as raw:
        yield raw


StartService = Callable[..., Service]


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[StartService]:
    """``start_service(env, *options)``: a Service in ``tmp_path`` with the environment
    ``env`` and `streamq run` ``options``, once ready; each is drained afterwards."""
    started: list[Service] = []

    def start(env: dict[str, str], *options: str) -> Service:
        service = Service(tmp_path, env, *options)
        started.append(service)
        wait_until(lambda: service.readiness()["ready"], what="the service ready")
        return service

    yield start
    for service in started:
        service.stop()


@pytest.mark.slow
def test_workers_share_one_server_keep_their_names_and_drain(
    env: dict[str, str], start_service: StartService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The issue's scenario: no URL, 2 workers, a second process publishes, a worker is
    SIGKILLed mid-work and comes back under its name, SIGTERM drains; nothing is lost."""
    env.pop("STREAMQ_REDIS_URL", None)
    monkeypatch.delenv("STREAMQ_REDIS_URL", raising=False)
    monkeypatch.setenv("STREAMQ_HOME", env["STREAMQ_HOME"])
    home, stream = Path(env["STREAMQ_HOME"]), env["TEST_STREAM"]
    try:
        service = start_service(env, "--workers", "2", "--log-format", "json")
        assert [w["queues"][0]["consumer"] for w in service.readiness()["workers"]] == [
            "svc-0", "svc-1",
        ]  # fmt: skip
        publisher = Publisher(stream=stream)  # this process reaches the workers' server
        client = redis.Redis.from_url(publisher.url, decode_responses=True)
        client.set(key(stream, "hold"), 1)
        ids = publisher.publish_many("job", list(range(6)))
        wait_until(lambda: pending_of(client, stream).get("svc-0", 0) >= 1, what="svc-0 busy")
        held = [e["message_id"] for e in client.xpending_range(
            stream, "workers", min="-", max="+", count=100, consumername="svc-0")]  # fmt: skip
        first_pid = service.worker(0)["pid"]
        os.kill(first_pid, signal.SIGKILL)
        client.delete(key(stream, "hold"))
        wait_until(lambda: service.worker(0).get("restarts") == 1 and service.worker(0)["ready"],
                   what="worker 0 restarted")  # fmt: skip
        assert service.worker(0)["pid"] != first_pid
        wait_until(lambda: client.hlen(key(stream, "handled")) == 6, what="every job handled")
        handled = client.hgetall(key(stream, "handled"))
        assert sorted(handled) == sorted(ids)
        assert {handled[i] for i in held} == {"svc-0 v1"}, "svc-0 recovered its own entries"
        Publisher(stream=f"{stream}-events").publish("event", 1)
        wait_until(lambda: client.hlen(key(stream, "events")) == 1, what="the second queue")
        # the handler's write is seen before its acknowledgement (acks are sent in batches)
        audit_done = f'streamq_group_pending{{group="audit",stream="{stream}-events"}} 0.0'
        wait_until(lambda: audit_done in service.get("/metrics", service.metrics)[1],
                   what="the event acknowledged, as /metrics shows")  # fmt: skip

        code, metrics = service.get("/metrics", service.metrics)
        assert code == 200, metrics
        for consumer in ("svc-0", "svc-1"):
            assert (
                f'streamq_received_total{{consumer="{consumer}",group="workers",stream="{stream}"}}'
                in metrics
            )
        assert f'streamq_stream_length{{stream="{stream}"}} 6.0' in metrics

        client.set(key(stream, "hold"), 1)  # one job in flight when SIGTERM comes
        last = publisher.publish("job", 99)
        wait_until(lambda: sum(pending_of(client, stream).values()) == 1, what="in flight")
        workers = [w["pid"] for w in service.readiness()["workers"]]
        service.process.send_signal(signal.SIGTERM)
        wait_until(lambda: service.readiness().get("stopping"), what="draining")
        client.delete(key(stream, "hold"))
        assert service.process.wait(timeout=30) == 0
        assert client.hget(key(stream, "handled"), last) is not None, "the in-flight job finished"
        assert sum(pending_of(client, stream).values()) == 0
        assert not any(pid_alive(pid) for pid in workers), "no worker outlives the supervisor"
        publisher.close()
    finally:
        shared.release_all()
    wait_until(lambda: not processes_of(home), what="the shared server to stop with its users")
    lines = [json.loads(line) for line in service.logs().splitlines() if line.startswith("{")]
    jobs = [line for line in lines if line["logger"] == "svc"]
    assert jobs and all(j["stream"] == stream and j["type"] == "job" for j in jobs)
    assert {j["consumer"] for j in jobs} == {"svc-0", "svc-1"}
    assert all(j["entry_id"] in [*ids, last] and j["delivery"] >= 1 for j in jobs)


@pytest.mark.slow
def test_a_second_signal_exits_at_once(
    session_env: dict[str, str], start_service: StartService, client: redis.Redis
) -> None:
    service = start_service(session_env)
    stream = session_env["TEST_STREAM"]
    worker = service.worker(0)["pid"]
    client.set(key(stream, "hold"), 1)
    client.xadd(stream, {"type": "job", "data": "1"})
    wait_until(lambda: sum(pending_of(client, stream).values()) == 1, what="in flight")
    service.process.send_signal(signal.SIGTERM)
    wait_until(lambda: service.readiness().get("stopping"), what="draining")
    started = time.monotonic()
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(timeout=10) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 5, "the second signal did not wait for the drain"
    wait_until(lambda: not pid_alive(worker), what="the worker gone")
    assert sum(pending_of(client, stream).values()) == 1, "left pending for the next start"


@pytest.mark.slow
def test_a_crashing_worker_is_restarted_with_backoff(
    session_env: dict[str, str], start_service: StartService, client: redis.Redis
) -> None:
    service = start_service(session_env)
    stream = session_env["TEST_STREAM"]
    client.xadd(stream, {"type": "crash", "data": "1"})  # kills its worker at each delivery
    wait_until(lambda: client.xlen(f"streamq:{{{stream}}}:dlq") == 1, what="dead-lettered")
    wait_until(lambda: service.readiness()["ready"], what="ready again")
    assert service.worker(0)["restarts"] == 2, "max_deliveries=2: two crashes, then a dead letter"
    waits = [line.split("restarting it in ")[1][:4] for line in service.logs().splitlines()
             if "restarting it in" in line]  # fmt: skip
    assert waits == ["0.5s", "1.0s"], service.logs()


@pytest.mark.slow
def test_reload_restarts_the_workers_on_a_code_change(
    tmp_path: Path, session_env: dict[str, str], start_service: StartService, client: redis.Redis
) -> None:
    service = start_service(session_env, "--reload")
    stream = session_env["TEST_STREAM"]
    before = service.worker(0)["pid"]
    first = client.xadd(stream, {"type": "job", "data": "1"})
    wait_until(lambda: client.hget(key(stream, "handled"), first) == b"svc-0 v1", what="v1 handled")
    source = tmp_path / "service.py"
    source.write_text(source.read_text().replace('VERSION = "v1"', 'VERSION = "v2"'))
    wait_until(lambda: service.worker(0).get("pid") not in (None, before)
               and service.worker(0)["ready"], what="a new worker")  # fmt: skip
    second = client.xadd(stream, {"type": "job", "data": "2"})
    wait_until(
        lambda: client.hget(key(stream, "handled"), second) == b"svc-0 v2", what="v2 handled"
    )
    assert service.worker(0)["restarts"] == 0, "a reload is not a crash"
    service.process.send_signal(signal.SIGINT)
    assert service.process.wait(timeout=20) == 0


@pytest.mark.slow
def test_a_syntax_error_during_reload_is_said_once_not_per_worker(
    tmp_path: Path, session_env: dict[str, str], start_service: StartService
) -> None:
    service = start_service(session_env, "--reload", "--workers", "2")
    source = tmp_path / "service.py"
    good = source.read_text()
    source.write_text(good + "\ndef broken(:\n")
    wait_until(lambda: all(service.worker(i).get("alive") is False for i in (0, 1)),
               what="both workers to exit on the error")  # fmt: skip
    wait_until(lambda: "waiting for a change" in service.logs(), what="the supervisor to wait")
    logs = service.logs()
    assert "Traceback" not in logs, logs
    errors = [line for line in logs.splitlines() if "SyntaxError" in line]
    assert len(errors) == 1, logs
    assert logs.count("waiting for a change") == 1, logs
    source.write_text(good)  # fixed: the workers come back
    wait_until(lambda: all(service.worker(i).get("ready") for i in (0, 1)), what="both back")
    service.process.send_signal(signal.SIGINT)
    assert service.process.wait(timeout=20) == 0


@pytest.mark.slow
def test_workers_stop_when_the_supervisor_is_killed(
    session_env: dict[str, str], start_service: StartService
) -> None:
    service = start_service(session_env, "--workers", "2")
    workers = [w["pid"] for w in service.readiness()["workers"]]
    service.process.kill()
    service.process.wait()
    wait_until(lambda: not any(pid_alive(pid) for pid in workers), timeout=15,
               what="the orphaned workers to stop by themselves")  # fmt: skip
    assert "the supervisor (pid" in service.logs() and "is gone: stopping" in service.logs()


@pytest.mark.slow
def test_a_target_that_cannot_run_fails_before_starting_workers(tmp_path: Path) -> None:
    (tmp_path / "idle.py").write_text(
        'from streamq import MessageQueue\nmq = MessageQueue(stream="idle")\n'
    )
    for target, message in [
        ("nosuchmodule:app", "cannot import 'nosuchmodule'"),
        ("idle:nothing", "'idle' has no attribute 'nothing'"),
        ("idle:mq", "no handlers registered"),
        ("idle", "expected module:attr"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "streamq.cli", "run", target], cwd=tmp_path,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert result.returncode == 2, (target, result.stderr)
        assert message in result.stderr, (target, result.stderr)


TARGETS = """
from streamq import App, MessageQueue
mq = MessageQueue("redis://127.0.0.1:1/0", stream="s", group="g", consumer="mailer")
other = MessageQueue("redis://127.0.0.1:1/0", stream="t", group="g")
app = App(mq, other)
def factory():
    return MessageQueue("redis://127.0.0.1:1/0", stream="f", group="g", consumer="f")
async def async_factory():
    return app
def wrong():
    return 42
def needs_settings(settings):
    return app
def broken():
    raise RuntimeError("no settings file")
number = 7
import json
from pydantic import BaseModel
class Model(BaseModel):
    n: int
"""


def test_load_target_takes_a_queue_an_app_or_a_factory(tmp_path: Path) -> None:
    (tmp_path / "targets_mod.py").write_text(TARGETS)
    queue_app = load_target("targets_mod:mq", tmp_path)
    assert isinstance(queue_app, App) and [q.stream for q in queue_app.queues] == ["s"]
    assert [q.stream for q in load_target("targets_mod:app", tmp_path).queues] == ["s", "t"]
    assert [q.stream for q in load_target("targets_mod:factory", tmp_path).queues] == ["f"]
    for spec, message in [
        ("targets_mod:async_factory", "not async"),
        ("targets_mod:wrong", "expected it to return a MessageQueue or App, got the int 42"),
        (
            "targets_mod:number",
            r"expected a MessageQueue or App \(or a function returning one\), "
            "got the int 7",
        ),
        ("targets_mod:Model", "got the class targets_mod.Model"),
        ("targets_mod:json", "got the module json"),
        ("targets_mod:needs_settings", r"needs_settings\(\) takes arguments \(settings\)"),
        ("targets_mod:broken", r"broken\(\) raised RuntimeError: no settings file"),
        ("json:dumps", r"dumps\(\) takes arguments \(obj\)"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_target(spec, tmp_path)


def test_each_slot_has_stable_consumer_names() -> None:
    import socket

    named = MessageQueue("redis://127.0.0.1:1/0", stream="s", consumer="mailer")
    default = MessageQueue("redis://127.0.0.1:1/0", stream="t")
    assign_slot(App(named, default), 3)
    assert named.consumer == "mailer-3"
    assert default.consumer == f"{socket.gethostname()}-3", "not <host>-<pid>: pids change"
    assign_slot(App(named, default), 1, "blue")  # streamq run --name blue
    assert (named.consumer, default.consumer) == ("blue-1", "blue-1")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_service_demo(tmp_path: Path) -> None:
    """`make demo-service`, on a shared server of its own (no URL anywhere)."""
    root = Path(__file__).resolve().parents[2]
    home = tmp_path / "home"
    env = {
        k: v for k, v in os.environ.items() if k not in ("STREAMQ_REDIS_URL", "PYTEST_CURRENT_TEST")
    }
    env["STREAMQ_HOME"] = str(home)
    result = subprocess.run(
        [sys.executable, "-m", "demos.service"], cwd=root, env=env,
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    for expected in (
        "worker 0 (pid", "consumers billing-1, mailer-1", "20 orders, 10 emails",
        "nothing lost: 20/20 orders, 10/10 emails, pending 0",
        "were handled by billing-0", "GET /metrics -> 200", "GET /readyz -> 200",
        "drained, exit code 0, pending 0", "'consumer': 'billing-",
    ):  # fmt: skip
        assert expected in result.stdout, result.stdout
    wait_until(lambda: not processes_of(home), what="the shared server to stop after the demo")
