"""A loopback TCP proxy in front of one server, with network faults switched on and off.

The soak (``tests/soak``) and ``tests/wire/test_network_faults.py`` put it between
streamq's clients and a real server. Its faults, set while it runs:

- ``latency``: every chunk, both ways, is passed on this many seconds after it arrived
  (order kept; throughput is not capped);
- :meth:`FaultProxy.cut_mid_reply`: every open connection is cut at its next reply, after
  half of that reply's bytes reached the client (both sides closed);
- :meth:`FaultProxy.half_open`: the open connections, and those opened within the given
  time, stop answering for good: what the client sends is swallowed, nothing comes back,
  and the proxy never closes them (nor does it tell the client the server went away);
  the client has to notice by its own timeouts and drop them;
- ``slow``: bytes per second at which the proxy reads from either side (a slow reader:
  replies trickle in, the server's output buffer fills); ``None`` for full speed;
- :meth:`FaultProxy.fail_next_reply`: the next reply on any connection, and only that one,
  is cut midway (``"cut"``) or swallowed, its connection left half-open (``"swallow"``):
  the command was carried out, its client cannot know.

:meth:`FaultProxy.serve` runs it in a task group (``await tg.start(proxy.serve)``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

CHUNK = 65536
SLOW_SLICE = 256  # bytes read at a time by a slow reader
GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(eq=False)
class Link:
    """One client connection and the proxy's connection to the server for it."""

    client: SocketStream
    server: SocketStream
    dead: bool = False  # half-open: nothing passed on any more, never closed by the proxy
    cut: bool = False  # the next reply is cut after half its bytes
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class FaultProxy:
    """Listens on a free loopback port and passes each connection on to ``upstream_port``."""

    def __init__(self, upstream_port: int, *, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.latency = 0.0
        self.slow: float | None = None
        self.counts: Counter[str] = Counter()  # accepted, refused, cut, half_open
        self._links: set[Link] = set()
        self._dead_until = -math.inf  # new links are half-open before this (loop time)
        self._next_reply: str | None = None  # "cut" or "swallow": the next reply's fate

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Accept connections until cancelled; report the port once listening."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener:
            task_status.started(self.port)
            await listener.serve(self._link)

    # -- faults --------------------------------------------------------------------------
    def cut_mid_reply(self) -> int:
        """Cut every open connection at its next reply; return how many were armed."""
        for link in self._links:
            link.cut = True
        return len(self._links)

    def fail_next_reply(self, how: str = "cut") -> None:
        """The next reply on any connection is cut midway (``"cut"``) or swallowed with its
        connection left half-open (``"swallow"``); the others pass."""
        assert how in ("cut", "swallow"), how
        self._next_reply = how

    def half_open(self, seconds: float) -> int:
        """Make the open connections and those opened within ``seconds`` stop answering;
        return how many were open."""
        self._dead_until = anyio.current_time() + seconds
        live = [link for link in self._links if not link.dead]
        for link in live:
            link.dead = True
        self.counts["half_open"] += len(live)
        return len(live)

    # -- what tests and the soak look at --------------------------------------------------
    @property
    def open_links(self) -> int:
        return len(self._links)

    @property
    def half_open_links(self) -> int:
        """Half-open connections their clients have not closed yet."""
        return sum(1 for link in self._links if link.dead)

    def upstream_addresses(self) -> set[str]:
        """``ip:port`` of the proxy's side of each connection to the server (the address
        the server knows the client by: ``CLIENT KILL ADDR``)."""
        found = set()
        for link in self._links:
            address = link.server.extra(SocketAttribute.local_address)
            assert isinstance(address, tuple), "a TCP connection's address is (host, port)"
            found.add(f"{address[0]}:{address[1]}")
        return found

    # -- passing bytes on -------------------------------------------------------------------
    async def _link(self, client: SocketStream) -> None:
        async with client:
            try:
                server = await anyio.connect_tcp(*self.upstream)
            except OSError:  # the server is down: the client sees its connection closed
                self.counts["refused"] += 1
                return
            self.counts["accepted"] += 1
            link = Link(client, server, dead=anyio.current_time() < self._dead_until)
            self.counts["half_open"] += link.dead
            async with server:
                self._links.add(link)
                try:
                    with link.scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._direction, link, client, server, False)
                            tg.start_soon(self._direction, link, server, client, True)
                finally:
                    self._links.discard(link)

    async def _direction(
        self, link: Link, source: SocketStream, sink: SocketStream, replies: bool
    ) -> None:
        """Pass ``source``'s bytes on to ``sink``; when ``source`` ends, end the link (but a
        half-open link ends only when its client closes it)."""
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._deliver, link, receive, sink, replies)
            async with send:
                await self._take(link, source, send)
        if not (replies and link.dead):
            link.scope.cancel()

    async def _take(
        self, link: Link, source: SocketStream, send: MemoryObjectSendStream[tuple[float, bytes]]
    ) -> None:
        while True:
            try:
                data = await source.receive(SLOW_SLICE if self.slow else CHUNK)
            except GONE:
                return
            if self.slow:
                await anyio.sleep(len(data) / self.slow)
            if not link.dead:  # a half-open link swallows what comes
                await send.send((anyio.current_time() + self.latency, data))

    async def _deliver(
        self, link: Link, receive: MemoryObjectReceiveStream[tuple[float, bytes]],
        sink: SocketStream, replies: bool,
    ) -> None:  # fmt: skip
        async with receive:
            async for due, data in receive:
                await anyio.sleep_until(due)
                if replies and self._next_reply is not None:
                    how, self._next_reply = self._next_reply, None
                    link.cut, link.dead = how == "cut", how == "swallow"
                    self.counts["swallowed" if link.dead else "armed"] += 1
                if link.dead:
                    continue
                try:
                    if replies and link.cut:
                        await self._cut(link, sink, data)
                        return
                    await sink.send(data)
                except GONE:
                    link.scope.cancel()
                    return

    async def _cut(self, link: Link, sink: SocketStream, reply: bytes) -> None:
        """Half of ``reply`` to the client, then both sides closed."""
        self.counts["cut"] += 1
        if len(reply) > 1:
            await sink.send(reply[: len(reply) // 2])
        link.scope.cancel()
