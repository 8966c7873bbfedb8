"""Issue 15, streamq.App: several queues in one process with one lifecycle, one health and
one metrics registry, usable from an ASGI lifespan."""

from __future__ import annotations

import functools
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import pytest

from streamq import App, AuthenticationFailedError, ConfigError, Message, MessageQueue, StartFrom
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.wire.client import connect
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def streams(redis_url: str) -> Iterator[list[str]]:
    names = [f"test-app-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    yield names
    for name in names:
        delete_stream_keys(redis_url, name)


def two_queue_app(url: str, streams: list[str], seen: dict[str, list[int]]) -> App:
    """Orders (group billing) and emails (group mailer), each with a handler."""
    orders = MessageQueue(url, stream=streams[0], group="billing", consumer="svc",
                          start=StartFrom.EARLIEST, config=TEST_TIMINGS)  # fmt: skip
    emails = MessageQueue(url, stream=streams[1], group="mailer", consumer="svc",
                          start=StartFrom.EARLIEST, config=TEST_TIMINGS)  # fmt: skip

    @orders.handler("order")
    async def order(msg: Message[int]) -> None:
        seen.setdefault("orders", []).append(msg.data)

    @emails.batch_handler("email", size=10, timeout=0.05)
    async def email(msgs: list[Message[int]]) -> None:
        seen.setdefault("emails", []).extend(m.data for m in msgs)

    return App(orders, emails, name="shop")


async def test_an_app_runs_its_queues_together_and_stops_them_together(
    redis_url: str, streams: list[str]
) -> None:
    seen: dict[str, list[int]] = {}
    app = two_queue_app(redis_url, streams, seen)
    orders, emails = app.queues
    with anyio.fail_after(20):
        async with app, anyio.create_task_group() as tg:
            await tg.start(app.run)
            await orders.publish_many("order", [1, 2, 3])
            await emails.publish_many("email", [7, 8])
            await wait_for(lambda: seen.get("orders") == [1, 2, 3] and seen.get("emails") == [7, 8],
                           what="both queues' messages handled")  # fmt: skip
            health = await app.health()
            assert health["ready"] is True, health
            assert [(q["stream"], q["group"], q["ready"]) for q in health["queues"]] == [
                (streams[0], "billing", True), (streams[1], "mailer", True),
            ]  # fmt: skip
            await app.stop()
            assert app.done.is_set() and app.stop_reason == "stopped"
            assert orders.done.is_set() and emails.done.is_set()
    assert (await app.health())["ready"] is False


async def test_entering_an_app_opens_every_queue(redis_url: str, streams: list[str]) -> None:
    app = two_queue_app(redis_url, streams, {})
    deployment = connect(redis_url)  # on a cluster the two streams may be on two masters
    try:
        async with app:
            groups = [await deployment.client_for(s).xinfo_groups(s) for s in streams]
            assert [[g["name"] for g in gs] for gs in groups] == [[b"billing"], [b"mailer"]]
    finally:
        await deployment.aclose()


async def test_running_serves_an_asgi_lifespan(redis_url: str, streams: list[str]) -> None:
    httpx = pytest.importorskip("httpx")
    starlette = pytest.importorskip("starlette.applications")
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen: dict[str, list[int]] = {}
    app = two_queue_app(redis_url, streams, seen)

    @asynccontextmanager
    async def lifespan(api: object) -> AsyncIterator[None]:  # FastAPI(lifespan=...) alike
        async with app.running():
            yield

    async def ready(request: Request) -> JSONResponse:
        health = await app.health()
        return JSONResponse(health, status_code=200 if health["ready"] else 503)

    api = starlette.Starlette(routes=[Route("/ready", ready)], lifespan=lifespan)
    with anyio.fail_after(20):
        async with lifespan(api):
            await app.queues[0].publish("order", 5)
            await app.queues[1].publish("email", 6)
            # both queues reading (a queue may start reading a little after the other)
            await wait_for(lambda: seen.get("orders") == [5] and seen.get("emails") == [6],
                           what="the order and the email handled")  # fmt: skip
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                response = await http.get("/ready")
            assert response.status_code == 200, response.text
            assert len(response.json()["queues"]) == 2
    assert all(mq.done.is_set() for mq in app.queues), "leaving the lifespan stops them all"


async def test_one_queue_failing_stops_the_others_and_raises(
    redis_url: str, streams: list[str]
) -> None:
    good = MessageQueue(redis_url, stream=streams[0], group="g", consumer="c",
                        config=TEST_TIMINGS)  # fmt: skip
    bad = MessageQueue(redis_url.replace("redis://", "redis://nobody:wrong@"),
                       stream=streams[1], group="g", consumer="c")  # fmt: skip
    for mq in (good, bad):
        mq.handler("x")(_ignore)
    app = App(good, bad)
    try:
        with anyio.fail_after(20), pytest.raises(AuthenticationFailedError):
            await app.run()
        assert good.done.is_set() and good.stop_reason == "stopped"
        assert app.stop_reason == "error"
    finally:  # run() opened them and leaves them open, as MessageQueue.run() does
        for mq in (good, bad):
            await mq.aclose()


async def _ignore(msg: Message[int]) -> None:
    pass


async def test_configuration_errors_are_raised_before_anything_runs(
    redis_url: str, streams: list[str]
) -> None:
    with pytest.raises(ConfigError, match="no queue"):
        await App().run()
    idle = MessageQueue(redis_url, stream=streams[0], group="g")
    with pytest.raises(ConfigError, match=f"no handlers registered on queue.*{streams[0]}/g"):
        await App(idle).run()
    with pytest.raises(ConfigError, match="no handlers"):
        async with App(idle).running():
            pass
    twin = MessageQueue(redis_url, stream=streams[0], group="g", consumer=idle.consumer)
    with pytest.raises(ConfigError, match="different names"):
        App(idle, twin)


async def test_one_metrics_registry_for_every_queue(redis_url: str, streams: list[str]) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    seen: dict[str, list[int]] = {}
    app = two_queue_app(redis_url, streams, seen)
    registry = prometheus.CollectorRegistry()
    collector = app.collector()
    registry.register(collector)
    try:
        async with app.running():
            await app.queues[0].publish("order", 1)
            await app.queues[1].publish("email", 2)
            await wait_for(lambda: len(seen) == 2, what="both handled")
            text = (await anyio.to_thread.run_sync(prometheus.generate_latest, registry)).decode()
    finally:
        collector.close()
    for stream, group in zip(streams, ("billing", "mailer"), strict=True):
        handled = f'streamq_handled_total{{consumer="svc",group="{group}",stream="{stream}"}} 1.0'
        assert handled in text, text
        assert f'streamq_stream_length{{stream="{stream}"}} 1.0' in text, text


async def test_running_never_hangs_on_an_unreachable_server() -> None:
    from streamq.server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    app = App(MessageQueue(url, stream="away", group="g", consumer="c", block=0.2))
    app.queues[0].handler("x")(_ignore)
    with anyio.fail_after(10):
        async with app.running():
            health = await app.health()
            assert health["ready"] is False and health["queues"][0]["connected"] is False
    assert app.queues[0].done.is_set()


async def test_a_stop_while_queues_connect_to_a_silent_server_ends_the_run_at_once() -> None:
    """A server that accepts connections and never answers: each queue's first attempt
    would wait for its reply timeout, one queue after another; a stop ends them at once
    (they have read nothing). A worker of `streamq run` stops so when its supervisor dies."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        app = App(*(MessageQueue(url, stream=s, group="g", consumer="c") for s in ("a", "b")))
        for mq in app.queues:
            mq.handler("x")(_ignore)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(app.run, handle_signals=False))
            silent.settimeout(10)
            connection, _ = await anyio.to_thread.run_sync(silent.accept)  # one is connecting
            started = anyio.current_time()
            app.request_stop("test")
            with anyio.fail_after(10):
                await app.done.wait()
            connection.close()
            assert anyio.current_time() - started < 2, "the stop waited for a reply timeout"


async def test_the_blocks_own_error_comes_out_of_running_as_itself(
    redis_url: str, streams: list[str]
) -> None:
    app = two_queue_app(redis_url, streams, {})
    with anyio.fail_after(20), pytest.raises(KeyError, match="the application failed"):
        async with app.running():
            raise KeyError("the application failed")
    assert all(mq.done.is_set() and not mq._topic.connected for mq in app.queues)
