"""Replies stay in step after a stall longer than the socket timeout.

A server frozen with SIGSTOP (a VM paused, a fork of a large data set), or a client process
frozen the same way, makes every read in flight time out; the replies still come, late. A
read that timed out must close its connection: kept, its late reply would answer the next
command sent on it (the read loop died on an XACK count read as XREADGROUP's reply, durable
publishes returned other entries' IDs). Here both stalls happen under a running consumer
and concurrent plain and durable publishes; afterwards every publish has its own entry's ID
(or a clear transient error), the consumer handled every entry, nothing is pending and
``topic_info()`` answers. Each test uses its own private server, so that stopping it
touches nobody else's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import anyio
import psutil
import pytest

from streamq import EmbeddedServer, Message, MessageQueue, ServerUnavailableError, StartFrom
from streamq.wire import resp
from streamq.wire.client import connect, connect_sync
from tests.helpers.clients import pending_count
from tests.helpers.queues import FAST
from tests.helpers.stall_client import PUBLISHERS, publish_one
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

SOCKET_TIMEOUT = 1.0  # the URL's socket_timeout: a reply late by this much is lost
# Past the socket timeout, and past a blocking read's BLOCK plus redis-py's default 5 s
# socket timeout too (what a read waited before streamq took the URL's socket_timeout).
STALL = 6.5


def stall_url(server: EmbeddedServer) -> str:
    return f"{server.url}?socket_timeout={SOCKET_TIMEOUT:g}"


def _stopped(pid: int) -> bool:
    return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)


def pid_of(server: EmbeddedServer) -> int:
    """The pid of ``server``'s valkey-server (a child of this process; its title names
    its address, ``valkey-server 127.0.0.1:PORT``)."""
    for child in psutil.Process().children(recursive=True):
        if f":{server.port}" in " ".join(child.cmdline()):
            return int(child.pid)
    raise AssertionError(f"no process of the server on port {server.port}")


async def stall(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT (also when cancelled)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        await anyio.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def check_outcomes(
    lines: list[str], handled: dict[str, list[int]], stream_ids: set[str], *, failed_some: bool
) -> None:
    """Every publish got its own entry's ID or a transient error; every entry of the
    stream was handled, with the data published under its ID. ``failed_some``: the stall
    must have failed a publish (a frozen server fails those sent meanwhile; a frozen client
    only those whose replies it was waiting for)."""
    wrong = [line for line in lines if line.startswith("wrong ")]
    assert not wrong, f"{len(wrong)} publishes got another command's reply: {wrong[:3]}"
    returned = [line.split()[1:3] for line in lines if line.startswith("ok ")]
    assert len(returned) > 100, f"too few publishes to test anything: {len(returned)}"
    if failed_some:
        assert any(line.startswith("lost ") for line in lines), "the stall failed no publish"
    mismatched = [
        (i, n, handled.get(i)) for i, n in returned if handled.get(i, [None])[0] != int(n)
    ]
    assert not mismatched, f"IDs returned for other entries' data: {mismatched[:5]}"
    assert set(handled) == stream_ids, (
        f"not handled: {sorted(stream_ids - set(handled))[:5]}, "
        f"handled but not in the stream: {sorted(set(handled) - stream_ids)[:5]}"
    )
    assert all(len(set(data)) == 1 for data in handled.values())


@pytest.mark.timeout(60)
async def test_a_reply_read_too_late_closes_its_connection(stream: str) -> None:
    """The boundary itself: a reply read by hand that comes too late (here: the socket
    timeout after a hold of 0.1 s, as a blocking read's BLOCK or WAIT's timeout) fails
    its command, and the next command on the same client gets its own reply, not the
    late one (async: a read loop's own connection; blocking: a pooled one)."""
    with EmbeddedServer() as server:
        url = f"{server.url}?socket_timeout=0.2"
        deployment, blocking = connect(url), connect_sync(url)
        client, sync_client = deployment.client_for(stream), blocking.client_for(stream)
        own = resp.OwnConnection(client, held=0.1)
        late, mine = resp.pack("ECHO", "late"), resp.pack("ECHO", "mine")
        try:
            assert await own.execute(mine, 1) == [b"mine"]  # connected beforehand
            assert resp.execute_sync(sync_client, mine, 1) == [b"mine"]
            async with anyio.create_task_group() as tg:
                tg.start_soon(stall, pid_of(server), 1.0)
                await wait_for(lambda: _stopped(pid_of(server)), what="the server stopped")
                with pytest.raises(ServerUnavailableError, match="Timeout reading"):
                    await own.execute(late, 1)
                with pytest.raises(ServerUnavailableError, match="Timeout reading"):
                    resp.execute_sync(sync_client, late, 1, held=0.1)
            assert await own.execute(mine, 1) == [b"mine"]
            assert resp.execute_sync(sync_client, mine, 1) == [b"mine"]
        finally:
            await own.release()
            await deployment.aclose()
            blocking.close()


@pytest.mark.timeout(120)
async def test_server_stalled_past_the_socket_timeout(stream: str) -> None:
    handled: dict[str, list[int]] = defaultdict(list)
    lines: list[str] = []
    with EmbeddedServer() as server:
        mq = MessageQueue(stall_url(server), stream=stream, group="g", consumer="c",
                          start=StartFrom.EARLIEST, config=FAST)  # fmt: skip

        @mq.handler("job")
        async def handle(msg: Message[int]) -> None:
            handled[msg.id].append(msg.data)

        publishing = True

        async def publisher(number: int, durable: bool) -> None:
            n = number * 1_000_000
            while publishing:
                lines.append(await publish_one(mq, n, durable))
                n += 1
                await anyio.sleep(0.005)

        async with mq, anyio.create_task_group() as tg:
            await tg.start(mq.run)
            async with anyio.create_task_group() as publishers:
                for kind, numbers in PUBLISHERS.items():
                    for number in numbers:
                        publishers.start_soon(publisher, number, kind == "durable")
                await wait_for(lambda: len(handled) > 50, what="consumption to start")
                await stall(pid_of(server), STALL)
                await anyio.sleep(2.0)  # traffic after the stall, on the connections left
                publishing = False
            info = await mq.topic_info()
            stream_ids = {entry_id.decode() for entry_id, _ in await mq.client.xrange(stream)}
            assert info.length == len(stream_ids)
            await wait_for(lambda: set(handled) >= stream_ids, timeout=30, what="all handled")

            async def nothing_pending() -> bool:
                return await pending_count(mq.client, stream, "g") == 0

            await wait_for(nothing_pending, timeout=15, what="nothing pending")
            await mq.stop()
        assert mq.stop_reason == "stopped"
    check_outcomes(lines, handled, stream_ids, failed_some=True)


def spawn_client(url: str, stream: str, out_dir: Path) -> subprocess.Popen[str]:
    """``tests.helpers.stall_client`` (a consumer that publishes), its stderr in ``out_dir``."""
    with open(out_dir / "stderr", "w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.stall_client", url, stream, str(out_dir)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip


@pytest.mark.timeout(120)
async def test_client_stalled_past_the_socket_timeout(stream: str, tmp_path: Path) -> None:
    with EmbeddedServer() as server:
        process = spawn_client(stall_url(server), stream, tmp_path)
        assert process.stdout is not None
        try:
            assert process.stdout.readline().strip() == "ready", "the client did not start"
            await wait_for(lambda: _count(tmp_path / "handled") > 50, what="consumption")
            await stall(process.pid, STALL)
            await anyio.sleep(2.0)
            process.send_signal(signal.SIGUSR1)  # stop publishing; then topic_info()
            info = await anyio.to_thread.run_sync(process.stdout.readline)
            ok = info.startswith("info ") and not info.startswith("info failed")
            assert ok, f"{info or 'the client exited'}; its stderr: {_tail(tmp_path)}"
            mq = MessageQueue(server.url, stream=stream, group="g", consumer="check")
            async with mq:
                stream_ids = {i.decode() for i, _ in await mq.client.xrange(stream)}
                assert info.split() == ["info", str(len(stream_ids))]
                await wait_for(
                    lambda: set(_handled(tmp_path)) >= stream_ids, timeout=30, what="all handled"
                )

                async def nothing_pending() -> bool:
                    return await pending_count(mq.client, stream, "g") == 0

                await wait_for(nothing_pending, timeout=15, what="nothing pending")
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=30)
            assert process.returncode == 0 and "stopped: signal" in output, (
                f"exit {process.returncode}: {output}; its stderr: {_tail(tmp_path)}"
            )
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    lines = (tmp_path / "published").read_text().splitlines()
    check_outcomes(lines, _handled(tmp_path), stream_ids, failed_some=False)


def _tail(out_dir: Path) -> str:
    return (out_dir / "stderr").read_text()[-3000:]


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _handled(out_dir: Path) -> dict[str, list[int]]:
    handled: dict[str, list[int]] = defaultdict(list)
    path = out_dir / "handled"
    for line in path.read_text().splitlines() if path.exists() else []:
        entry_id, data = line.split()
        handled[entry_id].append(int(data))
    return handled
