"""The soak's network faults: a fault proxy (:mod:`tests.helpers.fault_proxy`) in front of
each server node, between it and the soak's producers and consumers.

On one node the processes are given the proxy's URL. On a cluster the nodes tell clients
their addresses themselves (``CLUSTER SLOTS``, ``MOVED``), so a proxy in front of one node
alone would be bypassed: each node gets a proxy of its own and announces the proxy's port
to clients (``cluster-announce-client-port``; replication and the cluster bus keep the
nodes' own ports), set again on a node restarted after a kill. Every client then goes
through the proxies, the soak's own tally and operator faults included (they retry).

The faults, one at a time like the others (:class:`tests.soak.faults.Injector`):

- ``net_latency``: 50-500 ms added to every chunk both ways, for a few seconds;
- ``net_cut``: every open connection cut at its next reply, after half of it;
- ``net_half_open``: every open connection (and those opened within a second or two)
  stops answering for good, never closed by the proxy: each client must notice by its
  own timeouts;
- ``net_slow``: the proxy reads 4-32 KB/s from either side for a few seconds.

After each, every consumer must handle entries again within :data:`STUCK_AFTER` seconds
(while the producers still publish): a consumer that does not is stuck, and the fault
fails the soak.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from urllib.parse import urlparse, urlunparse

import anyio
import redis
from anyio.abc import TaskGroup

from streamq.server.cluster import EmbeddedCluster
from streamq.wire.timeouts import SOCKET_TIMEOUT
from tests.helpers.fault_proxy import FaultProxy
from tests.soak.ordered import LEASE
from tests.soak.processes import Consumers
from tests.soak.soak_consumer import BLOCK

KINDS = ("net_latency", "net_cut", "net_half_open", "net_slow")
LATENCY = (0.05, 0.5)
SLOW_BYTES_PER_S = (4_000.0, 32_000.0)
FAULT_SECONDS = (3.0, 8.0)
HALF_OPEN_WINDOW = (0.5, 2.0)
CUT_SECONDS = 1.0  # connections are cut as their replies come
# A dead connection is noticed when a read on it times out (socket timeout plus BLOCK): the
# producers' (new entries come again), then the consumers' read and another of their
# connections in turn; ordered mode then acquires its partitions again (a lease lapsed
# meanwhile, another one may pass before the assignment settles).
STUCK_AFTER = 3 * (SOCKET_TIMEOUT + BLOCK) + 2 * LEASE + 5.0
PROGRESS_POLL = 0.5
ANNOUNCED_WITHIN = 15.0


def with_port(url: str, port: int) -> str:
    """``url`` with its port replaced (credentials, database and options kept)."""
    parts = urlparse(url)
    netloc = parts.netloc.rpartition("@")
    host = parts.hostname or "127.0.0.1"
    address = f"{host}:{port}"
    return urlunparse(parts._replace(netloc=f"{netloc[0]}@{address}" if netloc[0] else address))


class Network:
    """The proxies, by the port of the node each fronts."""

    def __init__(self, proxies: dict[int, FaultProxy]) -> None:
        self.proxies = proxies

    @classmethod
    async def start(cls, tg: TaskGroup, ports: list[int], host: str = "127.0.0.1") -> Network:
        proxies = {port: FaultProxy(port, upstream_host=host) for port in ports}
        for proxy in proxies.values():
            await tg.start(proxy.serve)
        return cls(proxies)

    def url_for(self, url: str) -> str:
        """The URL the soak's processes use: through the proxy of ``url``'s node."""
        return with_port(url, self.proxies[urlparse(url).port or 6379].port)

    def node_port(self, port: int) -> int:
        """The node behind a proxy's port (a node's own port is returned as it is)."""
        for node_port, proxy in self.proxies.items():
            if proxy.port == port:
                return node_port
        return port

    def upstream_addresses(self, node_port: int) -> set[str]:
        """The proxy's connections to the node (``ip:port`` as the node knows them)."""
        proxy = self.proxies.get(node_port)
        return proxy.upstream_addresses() if proxy else set()

    # -- a cluster's nodes announce their proxies ------------------------------------------
    def announce(self, node_port: int) -> None:
        """Make the node tell clients its proxy's port (blocking)."""
        with redis.Redis(host="127.0.0.1", port=node_port, socket_timeout=5) as client:
            client.config_set("cluster-announce-client-port", self.proxies[node_port].port)

    def announce_all(self, cluster: EmbeddedCluster) -> None:
        """Every node announces its proxy; wait until each sees only proxies (blocking)."""
        for port in self.proxies:
            self.announce(port)
        wanted = {p.port for p in self.proxies.values()}
        deadline = time.monotonic() + ANNOUNCED_WITHIN
        while {node.port for node in cluster.nodes} - wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes do not announce their proxies {sorted(wanted)}")
            time.sleep(0.1)

    # -- the faults ----------------------------------------------------------------------
    async def latency(self, rng: random.Random) -> str:
        latency, seconds = rng.uniform(*LATENCY), rng.uniform(*FAULT_SECONDS)
        await self._for(seconds, latency=latency)
        return f"{latency * 1000:.0f} ms added both ways for {seconds:.1f}s"

    async def slow(self, rng: random.Random) -> str:
        rate, seconds = rng.uniform(*SLOW_BYTES_PER_S), rng.uniform(*FAULT_SECONDS)
        await self._for(seconds, slow=rate)
        return f"a slow reader ({rate / 1000:.0f} KB/s) for {seconds:.1f}s"

    async def cut(self, rng: random.Random) -> str:
        armed = sum(proxy.cut_mid_reply() for proxy in self.proxies.values())
        await anyio.sleep(CUT_SECONDS)
        cut = sum(proxy.counts["cut"] for proxy in self.proxies.values())
        return f"{armed} connections armed to be cut at their next reply ({cut} cut so far)"

    async def half_open(self, rng: random.Random) -> str:
        window = rng.uniform(*HALF_OPEN_WINDOW)
        stopped = sum(proxy.half_open(window) for proxy in self.proxies.values())
        await anyio.sleep(window)
        return f"{stopped} connections (and new ones for {window:.1f}s) stopped answering"

    async def _for(
        self, seconds: float, *, latency: float = 0.0, slow: float | None = None
    ) -> None:
        for proxy in self.proxies.values():
            proxy.latency, proxy.slow = latency, slow
        try:
            await anyio.sleep(seconds)
        finally:
            for proxy in self.proxies.values():
                proxy.latency, proxy.slow = 0.0, None


async def every_consumer_progresses(consumers: Consumers, publishing: Callable[[], bool]) -> str:
    """Wait until each consumer handled more entries than now; raise naming the ones that
    did not within STUCK_AFTER seconds (only while entries are still being published)."""
    began = time.monotonic()
    before = handled_counts(await anyio.to_thread.run_sync(consumers.stats))
    waiting = set(consumers.names.values())  # one that does not answer its stats waits too
    while waiting and publishing():
        if time.monotonic() - began > STUCK_AFTER:
            raise RuntimeError(f"consumers {sorted(waiting)} handled nothing for "
                               f"{STUCK_AFTER:.0f}s after the fault: stuck")  # fmt: skip
        await anyio.sleep(PROGRESS_POLL)
        now = handled_counts(await anyio.to_thread.run_sync(consumers.stats))
        waiting = {n for n in waiting if now.get(n, -1) <= before.get(n, -1)}
    if waiting:
        return "progress not checked: publishing is over"
    return f"every consumer handled entries again within {time.monotonic() - began:.1f}s"


def handled_counts(stats: dict[str, dict[str, int]]) -> dict[str, int]:
    return {name: figures.get("handled", 0) for name, figures in stats.items()}
