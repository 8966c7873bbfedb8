"""Issue 12, lifecycle: running() always returns, an unreachable server is waited for,
a closed queue reopens, signals are handled only when run() is the process's main job."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

import anyio
import pytest

from streamq import AuthenticationFailedError, Message, MessageQueue, StartFrom
from streamq.server import EmbeddedServer, free_port
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


def with_handler(mq: MessageQueue, seen: list[int] | None = None) -> MessageQueue:
    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        if seen is not None:
            seen.append(msg.data)

    return mq


@pytest.mark.parametrize("body", ["pass", "sleep0", "publish"])
async def test_leaving_running_always_stops_the_consumer(
    make_queue: QueueFactory, body: str
) -> None:
    mq = with_handler(make_queue())
    with anyio.fail_after(10):
        async with mq.running():
            if body == "sleep0":
                await anyio.sleep(0)  # noqa: ASYNC115 - the issue's exact case
            elif body == "publish":
                await mq.publish("job", 1)
    assert mq.done.is_set() and mq.stop_reason == "stopped"


@pytest.mark.slow
async def test_running_waits_for_an_unreachable_server_and_then_consumes() -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    seen: list[int] = []
    mq = with_handler(
        MessageQueue(
            url,
            stream="late",
            group="g",
            consumer="c",
            start=StartFrom.EARLIEST,
            block=0.2,
            claim_interval=0.2,
        ),
        seen,
    )
    with anyio.fail_after(30):
        async with mq.running():
            health = await mq.health()
            assert health["ready"] is False and health["connected"] is False
            with EmbeddedServer(port=port):
                await wait_for(lambda: _ready(mq), timeout=15, what="consumer ready")
                await mq.publish("job", 5)
                await wait_for(lambda: seen == [5], what="the job handled")
            # leaving running() while the server is gone again still returns
    assert mq.done.is_set()


async def _ready(mq: MessageQueue) -> bool:
    return bool((await mq.health())["ready"])


async def test_running_raises_configuration_errors_at_startup(redis_url: str) -> None:
    bad = redis_url.replace("redis://", "redis://nobody:wrong@")
    mq = with_handler(MessageQueue(bad, stream="auth", group="g", consumer="c"))
    with anyio.fail_after(10), pytest.raises(AuthenticationFailedError):
        async with mq.running():
            pytest.fail("running() started with refused credentials")


async def test_open_run_close_open_again(make_queue: QueueFactory) -> None:
    seen: list[int] = []
    mq = with_handler(make_queue(), seen)

    def handled_up_to(n: int) -> Callable[[], bool]:
        return lambda: seen == list(range(n + 1))

    for n in range(3):
        async with mq:
            await mq.publish("job", n)
            async with anyio.create_task_group() as tg:
                tg.start_soon(mq.run)
                await wait_for(handled_up_to(n), what=f"job {n}")
                await mq.stop()
    assert seen == [0, 1, 2]


async def test_run_inside_a_test_leaves_sigterm_alone(make_queue: QueueFactory) -> None:
    mq = with_handler(make_queue())
    before = signal.getsignal(signal.SIGTERM)
    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        await anyio.sleep(0.2)
        assert signal.getsignal(signal.SIGTERM) is before
        await mq.stop()


async def test_run_restores_the_previous_signal_handlers(make_queue: QueueFactory) -> None:
    mq = with_handler(make_queue())
    marker = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        mine = signal.getsignal(signal.SIGTERM)
        async with mq, anyio.create_task_group() as tg:
            tg.start_soon(lambda: mq.run(handle_signals=True))
            await wait_for(
                lambda: signal.getsignal(signal.SIGTERM) is not mine, what="run() owning SIGTERM"
            )
            await mq.stop()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, marker)


SERVICE = textwrap.dedent(
    """
    import anyio, sys
    from streamq import Message, MessageQueue

    mq = MessageQueue(sys.argv[1], stream=sys.argv[2], group="g", consumer="svc", grace=30)

    @mq.handler("slow")
    async def slow(msg: Message[int]) -> None:
        print("handling", flush=True)
        await anyio.sleep(60)

    async def main() -> None:
        async with mq:
            await mq.publish("slow", 1)
            await mq.run()
        print("stopped:", mq.stop_reason, flush=True)

    anyio.run(main)
    """
)


@contextmanager
def service(
    script: str, redis_url: str, stream: str
) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """The Python ``script`` run as a service of ``stream`` (its arguments: the URL, the
    stream), with its standard output; killed afterwards if it is still running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, redis_url, stream],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"},
    )
    assert proc.stdout is not None
    try:
        yield proc, proc.stdout
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.slow
def test_sigterm_stops_gracefully_and_a_second_one_exits_at_once(
    redis_url: str, stream: str
) -> None:
    with service(SERVICE, redis_url, stream) as (proc, stdout):
        assert stdout.readline().strip() == "handling"
        proc.send_signal(signal.SIGTERM)  # graceful: waits up to grace=30s for the handler
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        proc.send_signal(signal.SIGTERM)  # second one: at once
        assert proc.wait(timeout=5) == -signal.SIGTERM


READY_SERVICE = textwrap.dedent(
    """
    import anyio, sys
    from streamq import Message, MessageQueue

    mq = MessageQueue(sys.argv[1], stream=sys.argv[2], group="g", consumer="svc")

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        pass

    async def main() -> None:
        async with mq, anyio.create_task_group() as tg:
            await tg.start(mq.run)
            print("ready", flush=True)
        print("stopped:", mq.stop_reason, flush=True)

    anyio.run(main)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_a_signal_right_after_ready_is_a_graceful_stop(
    redis_url: str, stream: str, attempt: int
) -> None:
    """Readiness (``tg.start(mq.run)``) is reported once SIGTERM is a graceful stop: it
    was reported before run() installed its handlers, so a supervisor's SIGTERM sent on
    "ready" could kill the process the default way (found by a fault test on Redis 8.6)."""
    with service(READY_SERVICE, redis_url, stream) as (proc, stdout):
        assert stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, "SIGTERM right after ready killed the service"
        assert stdout.read().strip() == "stopped: signal"


@pytest.mark.slow
async def test_control_channel_outage_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamq")
    with EmbeddedServer() as server:
        mq = with_handler(
            MessageQueue(server.url, stream="out", group="g", consumer="c", block=0.2)
        )
        async with mq.running():
            await wait_for(lambda: _ready(mq), what="ready before the outage")
            server.kill()
            await anyio.sleep(3.0)
            server.restart()
            await wait_for(lambda: _ready(mq), timeout=20, what="ready after the outage")
    lost = [r for r in caplog.records if "control channel lost" in r.getMessage()]
    back = [
        r
        for r in caplog.records
        if "control channel" in r.getMessage() and "back" in r.getMessage()
    ]
    assert len(lost) == 1, [r.getMessage() for r in lost]
    assert len(back) == 1


async def test_running_closes_what_it_opened_when_the_block_raises(
    make_queue: QueueFactory,
) -> None:
    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        pass

    with pytest.raises(KeyError, match="the application failed") as caught:
        async with mq.running():
            raise KeyError("the application failed")
    assert caught.value.__context__ is None, "the block's error came out chained to a group"
    assert mq.done.is_set() and mq.stop_reason == "stopped"
    assert not mq._topic.connected, "running() left its connections open"
    assert mq.health is not None and (await mq.health())["state"] == "closed"
