"""The fault proxy of the tests (tests/helpers/fault_proxy.py) does what each of its faults
says (latency, a reply cut midway, a half-open connection, a slow reader), and a consumer
behind it handles every entry while all four happen in turn."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import anyio
import pytest
import redis.asyncio as aioredis
from anyio.abc import SocketStream

from streamq import Message, MessageQueue, StartFrom
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.queues import FAST, handled_messages
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

BIG = 20_000  # bytes of an ECHO: a reply of several reads
SOCKET_TIMEOUT = 1.0  # the consumer's: a half-open connection is noticed after this


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[FaultProxy]:
    proxy = FaultProxy(urlparse(redis_url).port or 6379)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        yield proxy
        tg.cancel_scope.cancel()


def command(*parts: bytes) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


async def read_reply(conn: SocketStream, size: int, timeout: float = 5.0) -> bytes:
    """Up to ``size`` bytes, until the connection ends or ``timeout`` passes."""
    got = b""
    with anyio.move_on_after(timeout):
        while len(got) < size:
            try:
                got += await conn.receive()
            except anyio.EndOfStream:
                break
    return got


def echoed(payload: bytes) -> bytes:
    """The reply to ``ECHO payload``."""
    return b"$%d\r\n%s\r\n" % (len(payload), payload)


async def echo(proxy: FaultProxy, payload: bytes) -> tuple[bytes, float]:
    """ECHO through the proxy on a new connection: what came back and how long it took."""
    async with await anyio.connect_tcp("127.0.0.1", proxy.port) as conn:
        began = time.monotonic()
        await conn.send(command(b"ECHO", payload))
        reply = await read_reply(conn, len(echoed(payload)))
        return reply, time.monotonic() - began


async def test_latency_is_added_both_ways(proxy: FaultProxy) -> None:
    _, quick = await echo(proxy, b"x")
    proxy.latency = 0.25
    reply, slow = await echo(proxy, b"x")
    assert reply == b"$1\r\nx\r\n"
    assert slow >= 0.5 > quick, (quick, slow)


async def test_a_reply_is_cut_midway_and_the_connection_closed(proxy: FaultProxy) -> None:
    payload = b"y" * BIG
    async with await anyio.connect_tcp("127.0.0.1", proxy.port) as conn:
        await conn.send(command(b"PING"))
        assert await read_reply(conn, 7) == b"+PONG\r\n"
        assert proxy.cut_mid_reply() == 1
        await conn.send(command(b"ECHO", payload))
        reply = await read_reply(conn, len(echoed(payload)))  # ends early: closed
    assert 0 < len(reply) < len(payload), len(reply)
    assert reply.startswith(b"$%d\r\n" % BIG)
    assert (await echo(proxy, payload))[0] == echoed(payload)  # new connections are whole


async def test_a_half_open_connection_stops_answering_and_stays_open(proxy: FaultProxy) -> None:
    async with await anyio.connect_tcp("127.0.0.1", proxy.port) as conn:
        await conn.send(command(b"PING"))
        assert await read_reply(conn, 7) == b"+PONG\r\n"
        assert proxy.half_open(0.5) == 1
        await conn.send(command(b"PING"))
        assert await read_reply(conn, 7, timeout=1.0) == b""  # no answer, no end either
        assert proxy.half_open_links == 1
        await anyio.sleep(0.5)  # past the window: a new connection answers
        assert (await echo(proxy, b"z"))[0] == b"$1\r\nz\r\n"
    await wait_for(lambda: proxy.half_open_links == 0, what="the closed client's link to end")


async def test_a_slow_reader_trickles_a_reply(proxy: FaultProxy) -> None:
    payload = b"w" * BIG
    proxy.slow = 40_000.0  # bytes per second: the request and the reply take 0.5 s each
    reply, took = await echo(proxy, payload)
    assert reply == echoed(payload)
    assert took >= 2 * BIG / proxy.slow * 0.9, took


async def test_a_consumer_behind_the_faulty_network_loses_nothing(
    proxy: FaultProxy, redis_url: str, stream: str, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("the proxy fronts one node and the cluster's nodes announce their own "
                    "addresses; the soak runs a proxy per node (tests/soak/network.py)")  # fmt: skip
    url = f"{proxy.url}?socket_timeout={SOCKET_TIMEOUT:g}"
    handled: set[str] = set()
    mq = MessageQueue(url, stream=stream, group="g", consumer="c1", start=StartFrom.EARLIEST,
                      config=FAST)  # fmt: skip

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handled.add(msg.id)

    async with MessageQueue(redis_url, stream=stream, group="g") as publisher, mq:
        published: set[str] = set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            for fault in (latency, cut, half_open, slow_reader):
                published.update(await publisher.publish_many("job", list(range(100))))
                await fault(proxy)
                published.update(await publisher.publish_many("job", list(range(100))))
                await wait_for(lambda: handled >= published, 15.0, f"handled after {fault}")
            await mq.stop()
    assert handled == published
    assert proxy.counts["cut"] >= 1 and proxy.counts["half_open"] >= 1, proxy.counts


async def latency(proxy: FaultProxy) -> None:
    proxy.latency = 0.3
    await anyio.sleep(1.5)
    proxy.latency = 0.0


async def cut(proxy: FaultProxy) -> None:
    proxy.cut_mid_reply()
    await anyio.sleep(0.5)


async def half_open(proxy: FaultProxy) -> None:
    proxy.half_open(0.5)
    await anyio.sleep(0.5)


async def slow_reader(proxy: FaultProxy) -> None:
    proxy.slow = 8_000.0
    await anyio.sleep(1.5)
    proxy.slow = None


async def test_stop_notices_reach_a_consumer_again_after_its_connections_went_half_open(
    proxy: FaultProxy, redis_url: str, stream: str, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("the proxy fronts one node and the cluster's nodes announce their own "
                    "addresses; the soak runs a proxy per node (tests/soak/network.py)")  # fmt: skip
    url = f"{proxy.url}?socket_timeout={SOCKET_TIMEOUT:g}"
    started: list[str] = []
    cancelled: list[str] = []
    mq = MessageQueue(url, stream=stream, group="g", consumer="c1", start=StartFrom.EARLIEST,
                      config=FAST)  # fmt: skip

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        started.append(msg.id)
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(msg.id)
            raise

    operator = MessageQueue(redis_url, stream=stream, group="g")
    async with operator, mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        first = await operator.publish("job", 1)
        await wait_for(lambda: started == [first], what="the first entry to start")
        proxy.half_open(0.0)  # every connection of the consumer, its subscription too
        await anyio.sleep(3 * SOCKET_TIMEOUT)  # time for it to notice, by its timeouts
        second = await operator.publish("job", 2)
        await wait_for(lambda: second in started, what="the consumer reading again")
        await operator.stop_message(second)
        await wait_for(lambda: second in cancelled, 2 * SOCKET_TIMEOUT,
                       "the stop notice to cancel the running handler")  # fmt: skip
        tg.cancel_scope.cancel()


async def subscriptions(client: aioredis.Redis, proxy: FaultProxy) -> set[str]:
    """The proxy's connections on which the server has a sharded subscription."""
    ours = proxy.upstream_addresses()
    found = set()
    for line in (await client.execute_command("CLIENT", "LIST")).decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("addr") in ours and int(fields.get("ssub", "0")) > 0:
            found.add(fields["addr"])
    return found


async def test_every_subscription_is_made_again_after_its_connection_went_half_open(
    proxy: FaultProxy, redis_url: str, stream: str, client: aioredis.Redis, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("the proxy fronts one node and the cluster's nodes announce their own "
                    "addresses; the soak runs a proxy per node (tests/soak/network.py)")  # fmt: skip
    url = f"{proxy.url}?socket_timeout={SOCKET_TIMEOUT:g}"
    mq = MessageQueue(url, stream=stream, group="g", consumer="c1", start=StartFrom.EARLIEST,
                      config=FAST)  # fmt: skip
    handled = handled_messages(mq)
    operator = MessageQueue(redis_url, stream=stream, group="g")
    async with operator, mq, anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await operator.publish("job", 1)
        await wait_for(lambda: len(handled) == 1, what="the consumer running")
        before: set[str] = set()

        async def all_subscribed() -> bool:  # control channel, scheduler's wake, flow control
            before.update(await subscriptions(client, proxy))
            return len(before) == 3

        await wait_for(all_subscribed, what="the three subscriptions")
        proxy.half_open(0.0)

        async def made_again() -> bool:
            now = await subscriptions(client, proxy)
            return len(now) == 3 and not now & before

        await wait_for(made_again, 4 * SOCKET_TIMEOUT, "all three on new connections")
        tg.cancel_scope.cancel()
