"""The soak's faults, injected one at a time while traffic flows.

- ``kill``: SIGKILL a consumer, restart it under the same name or a new one;
- ``pause``: SIGSTOP a consumer for longer than ``claim_idle``, then SIGCONT;
- ``client_kill``: ``CLIENT KILL`` every connection of the soak's consumers and producers
  (found by their local ports, so that the runner's own connection and, on a shared
  external server, other people's clients are spared);
- ``server_crash``: SIGKILL the server and restart it on the same port and directory (AOF,
  ``appendfsync always``). Only on a server the soak started itself.
- ``stall``: SIGSTOP the server past the socket timeout (and a blocking read's ``BLOCK`` on
  top), then SIGCONT: every reply in flight comes late, after its read timed out; a
  connection kept then would answer its next command with that late reply. Only on a
  server the soak started itself.
- ``keeper_kill``: SIGKILL the keeper of the shared embedded server (its Valkey follows
  it); nobody restarts it but the soak's own producers and consumers, which must notice
  and bring it back on its port. Only with ``SOAK_SERVER=shared`` (:func:`kill_keeper`).
- ``master_kill``: SIGKILL the cluster master serving a partition of the topic, wait for
  its replica's promotion, restart the old one. Only with ``SOAK_SERVER=cluster``.
- ``stop_resume``: an operator stops a few entries (in flight, and the newest) and resumes
  them a moment later, while the consumers' cleanup passes run: each
  must still be handled once resumed.
- ``net_latency``, ``net_cut``, ``net_half_open``, ``net_slow``: the network between the
  soak's processes and the server degrades (:mod:`tests.soak.network`); every consumer must
  handle entries again within its timeouts afterwards.

A fault that cannot be applied (its commands keep failing, the server does not come back)
is not a fault that happened: :meth:`Injector.inject` records it in ``failures``, with its
name and error, and the soak fails.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import psutil
import redis
import redis.asyncio as aioredis

from streamq.errors import MessageNotFoundError
from streamq.server.cluster import EmbeddedCluster
from streamq.server.keeper import Paths, pid_alive, read_info, server_pid
from streamq.topic import control
from streamq.wire.slots import slot_of
from streamq.wire.timeouts import SOCKET_TIMEOUT
from tests.soak import network
from tests.soak.network import Network, every_consumer_progresses
from tests.soak.processes import Consumers, SoakServer
from tests.soak.soak_consumer import BLOCK, CLAIM_IDLE
from tests.soak.tally import retrying

KINDS = ("kill", "pause", "client_kill", "server_crash", "stall", "keeper_kill", "master_kill",
         "stop_resume", *network.KINDS)  # fmt: skip
OWN_SERVER_KINDS = ("server_crash", "stall")  # faults done to a server the soak started
PAUSE_SECONDS = (2.5 * CLAIM_IDLE, 4.0 * CLAIM_IDLE)
SERVER_DOWN_SECONDS = (0.2, 1.5)
# Past the time a reply may take: the socket timeout, after a blocking read's BLOCK.
STALL_SECONDS = (SOCKET_TIMEOUT + BLOCK + 1.0, SOCKET_TIMEOUT + BLOCK + 3.0)
NEW_NAME_CHANCE = 0.5
KEEPER_BACK_WITHIN = 30.0
STOPPED_ENTRIES = 5  # per stop_resume: up to 5 in flight and the 5 newest
STOPPED_SECONDS = (0.5, 3.0)


def connections_of(pids: list[int], server_port: int | set[int]) -> set[str]:
    """``ip:port`` (client side) of every TCP connection of ``pids`` to the server."""
    addresses = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:  # exited meanwhile
            continue
        for c in connections:
            ports = server_port if isinstance(server_port, set) else {server_port}
            if c.raddr and c.raddr.port in ports:
                addresses.add(f"{c.laddr.ip}:{c.laddr.port}")
    return addresses


class Injector:
    """Picks the next fault from a shuffled cycle of the kinds (so each comes round) and
    applies it; ``counts`` and ``restarts`` feed the summary."""

    def __init__(
        self,
        rng: random.Random,
        consumers: Consumers,
        client_for: Callable[[str], aioredis.Redis],
        server_port: int,
        server: SoakServer | None,
        producer_pids: Callable[[], list[int]],
        shared_home: Path | None = None,
        cluster: EmbeddedCluster | None = None,
        victim_stream: str = "",
        net: Network | None = None,
    ) -> None:
        # A client per stream: on a cluster each partition stream has its own slot.
        self._rng, self._consumers, self._client_for = rng, consumers, client_for
        self._port, self._server, self._producer_pids = server_port, server, producer_pids
        self._home, self._cluster, self._victim_stream = shared_home, cluster, victim_stream
        self._net = net
        self.kinds = [k for k in KINDS if (k not in OWN_SERVER_KINDS or server is not None)
                      and (k != "keeper_kill" or shared_home is not None)
                      and (k != "master_kill" or cluster is not None)
                      and (k not in network.KINDS or net is not None)]  # fmt: skip
        self._cycle: list[str] = []
        self.counts: Counter[str] = Counter()
        self.restarts: Counter[str] = Counter()
        self.failures: list[str] = []

    async def inject(self) -> str:
        """Apply the next fault; return a line describing it (or why it failed, also kept
        in ``failures``: a fault that did not happen is a failure of the soak)."""
        if not self._cycle:
            self._cycle = self._rng.sample(self.kinds, len(self.kinds))
        kind = self._cycle.pop()
        actions: dict[str, Callable[[], Awaitable[str]]] = {
            "kill": self.kill, "pause": self.pause,
            "client_kill": self.client_kill, "server_crash": self.server_crash,
            "stall": self.stall,
            "keeper_kill": self.keeper_kill, "master_kill": self.master_kill,
            "stop_resume": self.stop_resume,
            "net_latency": self.net_latency, "net_cut": self.net_cut,
            "net_half_open": self.net_half_open, "net_slow": self.net_slow,
        }  # fmt: skip
        try:
            description = await actions[kind]()
        except Exception as e:  # any error: the soak reports it, and fails
            self.failures.append(f"{kind} failed: {e!r}")
            return f"{kind} FAILED: {e!r}"
        self.counts[kind] += 1
        return f"{kind}: {description}"

    def _slot(self) -> int:
        return self._rng.randrange(len(self._consumers.names))

    async def kill(self) -> str:
        new_name = self._rng.random() < NEW_NAME_CHANCE
        self.restarts["new_name" if new_name else "same_name"] += 1
        return await anyio.to_thread.run_sync(self._consumers.kill, self._slot(), new_name)

    async def pause(self) -> str:
        slot, seconds = self._slot(), self._rng.uniform(*PAUSE_SECONDS)
        self._consumers.signal(slot, signal.SIGSTOP)
        try:
            await anyio.sleep(seconds)
        finally:
            self._consumers.signal(slot, signal.SIGCONT)
        return f"SIGSTOP {self._consumers.names[slot]} for {seconds:.1f}s, then SIGCONT"

    async def client_kill(self) -> str:
        pids = self._consumers.pids() + self._producer_pids()
        if self._cluster is not None:
            return await anyio.to_thread.run_sync(cluster_client_kill, self._cluster, pids,
                                                  self._net)  # fmt: skip
        addresses = await anyio.to_thread.run_sync(connections_of, pids, self._port)
        if self._net is not None:  # the processes' connections through the proxy
            addresses |= self._net.upstream_addresses(self._port)
        # again while the soak's own connection cannot answer (a fault before broke it)
        killed = await retrying(self._kill_clients, sorted(addresses))
        return f"CLIENT KILL of {killed} connections"

    async def _kill_clients(self, addresses: list[str]) -> int:
        async with self._client_for(self._victim_stream).pipeline(transaction=False) as pipe:
            for address in addresses:  # the filter form: a client already gone counts 0
                pipe.execute_command("CLIENT", "KILL", "ADDR", address)
            return sum(await pipe.execute())

    async def master_kill(self) -> str:
        assert self._cluster is not None
        return await anyio.to_thread.run_sync(kill_master, self._cluster, self._victim_stream,
                                              self._net)  # fmt: skip

    async def server_crash(self) -> str:
        assert self._server is not None
        down = self._rng.uniform(*SERVER_DOWN_SECONDS)
        await anyio.to_thread.run_sync(self._server.kill)
        await anyio.sleep(down)
        started = anyio.current_time()
        await anyio.to_thread.run_sync(self._server.start)
        took = anyio.current_time() - started
        return f"SIGKILL server, down {down:.1f}s, restarted with AOF in {took:.1f}s"

    async def stall(self) -> str:
        assert self._server is not None
        return await stall_server(self._server, self._rng.uniform(*STALL_SECONDS))

    async def stop_resume(self) -> str:
        stream = self._victim_stream
        client = self._client_for(stream)
        group = await retrying(client.xinfo_groups, stream)
        in_flight = await retrying(
            client.xpending_range, stream, group[0]["name"], "-", "+", STOPPED_ENTRIES
        )
        newest = await retrying(client.xrevrange, stream, count=STOPPED_ENTRIES)
        ids = {p["message_id"].decode() for p in in_flight} | {r[0].decode() for r in newest}
        stopped, taken = [], 0
        for entry_id in sorted(ids):
            with contextlib.suppress(MessageNotFoundError):  # removed by cleanup meanwhile
                taken += await retrying(control.stop_message, client, stream, entry_id)
                stopped.append(entry_id)
        seconds = self._rng.uniform(*STOPPED_SECONDS)
        await anyio.sleep(seconds)
        given_back = 0
        for entry_id in stopped:  # a resume that keeps failing ends the soak, red
            given_back += await retrying(control.resume_message, client, stream, entry_id)
        return (f"stopped {len(stopped)} entries ({taken} in flight) for {seconds:.1f}s, "
                f"resumed them ({given_back} given back)")  # fmt: skip

    async def net_latency(self) -> str:
        assert self._net is not None
        return await self._net_fault(self._net.latency)

    async def net_cut(self) -> str:
        assert self._net is not None
        return await self._net_fault(self._net.cut)

    async def net_half_open(self) -> str:
        assert self._net is not None
        return await self._net_fault(self._net.half_open)

    async def net_slow(self) -> str:
        assert self._net is not None
        return await self._net_fault(self._net.slow)

    async def _net_fault(self, fault: Callable[[random.Random], Awaitable[str]]) -> str:
        """The fault, then the check that no consumer is left stuck by it."""
        done = await fault(self._rng)
        progress = await every_consumer_progresses(self._consumers,
                                                   lambda: bool(self._producer_pids()))  # fmt: skip
        return f"{done}; {progress}"

    async def keeper_kill(self) -> str:
        assert self._home is not None
        return await anyio.to_thread.run_sync(kill_keeper, self._home)


async def stall_server(server: SoakServer, seconds: float) -> str:
    """SIGSTOP ``server`` for ``seconds``, then SIGCONT (also when the soak is cancelled)."""
    server.send_signal(signal.SIGSTOP)
    try:
        await anyio.sleep(seconds)
    finally:
        server.send_signal(signal.SIGCONT)
    return f"SIGSTOP server for {seconds:.1f}s (past the {SOCKET_TIMEOUT:g}s socket timeout), then SIGCONT"


def cluster_client_kill(cluster: EmbeddedCluster, pids: list[int], net: Network | None) -> str:
    """``CLIENT KILL`` of the processes' connections, on each node they are connected to
    (through its proxy, when there is a network: the proxy's connections)."""
    killed = 0
    for node in cluster.nodes:
        port = net.node_port(node.port) if net else node.port
        addresses = connections_of(pids, port) | (net.upstream_addresses(port) if net else set())
        if not addresses:
            continue
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as client:
            for address in sorted(addresses):
                with contextlib.suppress(redis.RedisError):  # gone meanwhile
                    killed += int(client.execute_command("CLIENT", "KILL", "ADDR", address))
    return f"CLIENT KILL of {killed} connections on {len(cluster.nodes)} nodes"


def kill_master(cluster: EmbeddedCluster, stream: str, net: Network | None = None) -> str:
    """SIGKILL the master serving ``stream``, wait until its replica took over, restart the
    old master (it comes back as a replica; with a network, announcing its proxy again)."""
    node_port: Callable[[int], int] = net.node_port if net else int
    victim = node_port(cluster.master_of_slot(slot_of(stream)).port)
    began = time.monotonic()
    cluster.kill_node(victim)
    cluster.wait_ready()
    heir = node_port(cluster.master_of_slot(slot_of(stream)).port)
    took = time.monotonic() - began
    cluster.restart_node(victim)
    if net is not None:
        net.announce(victim)
    return (f"SIGKILL master :{victim} of {stream}, replica :{heir} promoted in "
            f"{took:.1f}s, old master back in {time.monotonic() - began:.1f}s")  # fmt: skip


def kill_keeper(home: Path, back_within: float = KEEPER_BACK_WITHIN) -> str:
    """SIGKILL the keeper of the shared server of ``home``; wait until its Valkey has gone
    with it and until a new keeper serves the same port (started by a user that noticed:
    the soak's producers and consumers, not the soak). Raises if it does not come back."""
    paths = Paths(home)
    before = read_info(paths)
    if before is None:
        raise RuntimeError(f"no shared server recorded in {home}")
    killed = time.monotonic()
    os.kill(int(before["keeper_pid"]), signal.SIGKILL)
    deadline = killed + back_within
    while pid_alive(int(before["pid"])):  # it flushes its AOF on its way out
        if time.monotonic() > deadline:
            raise RuntimeError(f"Valkey {before['pid']} outlived its keeper")
        time.sleep(0.02)
    down = time.monotonic() - killed
    while True:
        after = read_info(paths)
        renewed = after is not None and after["keeper_pid"] != before["keeper_pid"]
        if after is not None and renewed and server_pid(int(after["port"])) == after["pid"]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the shared server was not started again within {back_within}s")
        time.sleep(0.05)
    same = "same port" if after["port"] == before["port"] else f"ANOTHER port {after['port']}"
    return (f"SIGKILL keeper {before['keeper_pid']} (Valkey gone in {down:.1f}s); "
            f"restarted by a user on the {same} in {time.monotonic() - killed:.1f}s")  # fmt: skip
