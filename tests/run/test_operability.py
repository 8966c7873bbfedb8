"""Metrics, health, background running in an ASGI lifespan, the sync publisher, and the
pytest plugin for users."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from streamq import Message, Publisher
from tests.helpers.clients import sync_client
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_stats_count_what_happened(make_queue: QueueFactory) -> None:
    from streamq import Reject

    mq = make_queue()

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        if msg.data == 3:
            raise Reject("three")

    async with mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await mq.publish_many("job", [1, 2, 3])
        # the dead-lettered entry is acked too (by the same Acker as the handled ones)
        await wait_for(lambda: mq.stats().get("acked") == 3 and mq.stats()["dead_lettered"] == 1)
        stats = mq.stats()
        await mq.stop()
    assert (stats["received"], stats["handled"], stats["in_flight"]) == (3, 2, 0)
    assert stats["handler_seconds"]["count"] == 3


async def test_prometheus_endpoint_with_queue_gauges(make_queue: QueueFactory, client: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from streamq.metrics import serve_metrics

    mq = make_queue()
    mq.handler("job")(_noop)
    async with mq, anyio.create_task_group() as tg:
        await mq.publish_many("job", [1, 2])
        tg.start_soon(mq.run)
        await wait_for(lambda: mq.stats().get("acked") == 2)
        await client.xgroup_create(mq.stream, "stalled", id="0")
        await client.xreadgroup("stalled", "s1", {mq.stream: ">"}, count=1)  # a stuck entry
        server = serve_metrics(mq, port=0)
        url = f"http://127.0.0.1:{server.port}/metrics"

        def scrape() -> str:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())

        body = await anyio.to_thread.run_sync(scrape)
        server.close()
        await mq.stop()
    samples = {
        (s.name, s.labels.get("group")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("streamq_handled_total", "g")] == 2
    assert samples[("streamq_stream_length", None)] == 2
    assert samples[("streamq_group_pending", "stalled")] == 1
    assert samples[("streamq_group_lag", "stalled")] == 1
    assert samples[("streamq_group_oldest_pending_age_seconds", "stalled")] >= 0
    assert ("streamq_handler_seconds_count", "g") in samples


def _scrape(url: str) -> dict[str, float]:
    """One Prometheus scrape as {(sample name, labels...): value}, by sample name."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}


async def test_metrics_for_a_container_with_process_metrics(make_queue: QueueFactory) -> None:
    """Bound on every interface (a container's port mapping reaches it), with the process
    metrics beside streamq's: the registry streamq serves is its own."""
    from streamq.metrics import serve_metrics

    mq = make_queue()
    async with mq:
        await mq.publish("job", 1)
        server = serve_metrics(mq, port=0, addr="0.0.0.0")
        try:
            assert server.address == ("0.0.0.0", server.port)
            url = f"http://127.0.0.1:{server.port}/metrics"
            samples = await anyio.to_thread.run_sync(_scrape, url)
        finally:
            server.close()
    assert samples["streamq_stream_length"] == 1
    assert samples["process_resident_memory_bytes"] > 0  # ProcessCollector
    assert samples["process_open_fds"] > 0
    assert "python_info" in samples  # PlatformCollector
    assert "python_gc_collections_total" in samples  # GCCollector


async def test_metrics_in_an_existing_registry(make_queue: QueueFactory) -> None:
    """The collector joins an application's own registry; serve_metrics can serve that
    registry (with the application's metrics) and takes its collector out on close."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from streamq.metrics import QueueCollector, serve_metrics

    mq = make_queue()
    registry = CollectorRegistry()
    Counter("app_requests", "the application's own metric", registry=registry).inc()
    async with mq:
        await mq.publish_many("job", [1, 2])
        collector = QueueCollector(mq)
        registry.register(collector)
        text = (await anyio.to_thread.run_sync(generate_latest, registry)).decode()
        registry.unregister(collector)
        collector.close()
        assert f'streamq_stream_length{{stream="{mq.stream}"}} 2.0' in text
        assert "app_requests_total 1.0" in text

        server = serve_metrics(mq, port=0, registry=registry)
        try:
            url = f"http://127.0.0.1:{server.port}/metrics"
            samples = await anyio.to_thread.run_sync(_scrape, url)
        finally:
            server.close()
    assert samples["streamq_stream_length"] == 2 and samples["app_requests_total"] == 1
    assert "process_open_fds" not in samples  # the given registry is served as it is
    assert "streamq_stream_length" not in generate_latest(registry).decode()  # unregistered


def test_a_scrape_over_a_url_whose_password_holds_a_hash_names_no_piece_of_it(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue given no URL takes $STREAMQ_REDIS_URL: a bad one is said at every scrape,
    without the password."""
    from prometheus_client import CollectorRegistry, generate_latest

    from streamq import MessageQueue
    from streamq.metrics import QueueCollector

    host = redis_url.split("://", 1)[1].rpartition("@")[2].split("/")[0]
    monkeypatch.setenv("STREAMQ_REDIS_URL", f"redis://:S3cr#3tPW@{host}/0")
    mq = MessageQueue(stream="metrics-secret", group="g")
    registry = CollectorRegistry()
    collector = QueueCollector(mq)
    registry.register(collector)
    try:
        generate_latest(registry)
        generate_latest(registry)
    finally:
        collector.close()
    assert caplog.text.count("queue gauges of metrics-secret unavailable") == 2
    assert "percent-encoded" in caplog.text
    assert "S3cr" not in caplog.text and "3tPW" not in caplog.text


async def test_running_inside_an_asgi_lifespan_and_health(make_queue: QueueFactory) -> None:
    mq = make_queue()
    handled: list[int] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        handled.append(msg.data)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A minimal ASGI app whose lifespan runs the consumer in the background."""
        assert scope["type"] == "lifespan"
        await receive()  # lifespan.startup
        async with mq.running():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    to_app, app_inbox = anyio.create_memory_object_stream[dict[str, Any]](4)
    app_outbox, from_app = anyio.create_memory_object_stream[dict[str, Any]](4)
    async with to_app, from_app, app_inbox, app_outbox, anyio.create_task_group() as tg:
        tg.start_soon(app, {"type": "lifespan"}, app_inbox.receive, app_outbox.send)
        await to_app.send({"type": "lifespan.startup"})
        assert (await from_app.receive())["type"] == "lifespan.startup.complete"
        await mq.publish("job", 7)
        await wait_for(lambda: handled == [7])

        async def acked() -> bool:  # acks are coalesced: sent just after the handler returns
            report = await mq.health()
            return (report["pending"], report["lag"]) == (0, 0)

        await wait_for(acked, what="the handled entry's ack")
        health = await mq.health()
        assert health["connected"] and health["consuming"]
        await to_app.send({"type": "lifespan.shutdown"})
        assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
    assert mq.done.is_set() and mq.stop_reason == "stopped"
    assert (await mq.health())["consuming"] is False


def test_sync_publisher(redis_url: str, stream: str) -> None:

    with Publisher(redis_url, stream=stream) as publisher:
        first = publisher.publish("email", {"to": "a@b.c"}, meta={"k": "v"})
        more = publisher.publish_many("email", [{"to": f"{i}@x"} for i in range(3)])
    entries = sync_client(redis_url, stream).xrange(stream)
    assert [e[0].decode() for e in entries] == [first, *more]
    fields = entries[0][1]
    assert fields.pop(b"pub")  # the publisher's marker (streamq.publish.resend)
    assert fields == {b"type": b"email", b"data": b'{"to":"a@b.c"}', b"meta": b'{"k":"v"}'}


@pytest.mark.slow
def test_pytest_plugin_for_users(pytester: pytest.Pytester, redis_url: str) -> None:
    pytester.makeconftest("")
    pytester.makepyfile(
        """
        import anyio, pytest
        from streamq import Message

        @pytest.mark.anyio
        async def test_handler_against_a_real_server(streamq_queue, streamq_stream):
            mq = streamq_queue()
            seen = []

            @mq.handler("job")
            async def handle(msg: Message[int]) -> None:
                seen.append(msg.data)

            async with mq, anyio.create_task_group() as tg:
                tg.start_soon(mq.run)
                await mq.publish("job", 41)
                with anyio.fail_after(5):
                    while not seen:
                        await anyio.sleep(0.01)
                await mq.stop()
            assert seen == [41] and mq.stream == streamq_stream

        @pytest.fixture
        def anyio_backend():
            return "asyncio"
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_pytest_plugin_removes_what_each_test_created(
    pytester: pytest.Pytester, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an external server the plugin deletes each test's stream and its streamq keys."""

    names = pytester.path / "streams.txt"
    pytester.makeconftest("")
    pytester.makepyfile(
        f"""
        import anyio, pytest
        from streamq import Message, Reject

        @pytest.mark.anyio
        @pytest.mark.parametrize("n", [1, 2])
        async def test_leaves_keys(streamq_queue, streamq_stream, n):
            mq = streamq_queue()

            @mq.handler("job")
            async def handle(msg: Message[int]) -> None:
                raise Reject("dead-letter it")

            async with mq, anyio.create_task_group() as tg:
                tg.start_soon(mq.run)
                ids = await mq.publish_many("job", [1, 2])
                await mq.stop_message(ids[1])
                with anyio.fail_after(5):
                    while not await mq.dead_letters():
                        await anyio.sleep(0.01)
                keys = await mq.client.keys("streamq:{{" + streamq_stream + "}}:*")
                await mq.stop()
            assert len(keys) >= 2  # dead letters and stopped IDs at least
            with open({str(names)!r}, "a") as f:
                f.write(streamq_stream + "\\n")

        @pytest.fixture
        def anyio_backend():
            return "asyncio"
        """
    )
    monkeypatch.setenv("STREAMQ_REDIS_URL", redis_url)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"
    )
    result.assert_outcomes(passed=2)
    streams = names.read_text().split()
    assert len(streams) == 2 and all(s.startswith("test-") for s in streams)
    for stream in streams:
        with sync_client(redis_url, stream) as r:
            assert not r.exists(stream)
            assert r.keys(f"streamq:{{{stream}}}:*") == []


async def _noop(msg: Message[int]) -> None:
    pass


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_ships_streamq_only_with_an_spdx_license(tmp_path: Path) -> None:
    """The wheel must not install the demos' top-level ``handlers`` package into users'
    site-packages, and its license is an SPDX expression (no deprecated license table)."""
    source = tmp_path / "src"  # a copy: no stale build/ of the checkout leaks into the wheel
    for name in ("streamq", "handlers", "demos"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(tmp_path)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("streamq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top_level == {"streamq"}, sorted(top_level)
    assert "streamq/py.typed" in names and "streamq/spark/source.py" in names
    (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
    headers = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: MIT" in headers, headers[:600]
    assert "deprecated" not in result.stdout + result.stderr
