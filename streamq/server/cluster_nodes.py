"""The nodes of an embedded cluster: one node's process, and what ``CLUSTER NODES`` says.

:class:`NodeProcess` runs one valkey-server in cluster mode (its ports, directory, log and
a short-timeout client). :class:`streamq.server.cluster.EmbeddedCluster` knows that a
cluster it formed (or one that failed over) is ready from the nodes' views: each is parsed
into :class:`ClusterNode` rows; the views must agree on who serves which slots and who
follows whom, and together serve all 16384 slots from running masters.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .binary import binary_path
from .private import reap, spawn_private
from .single import STOP_TIMEOUT

SLOTS = 16384
COMMAND_TIMEOUT = 2.0
POLL_INTERVAL = 0.05
LOG_TAIL = 1500
# Flags in CLUSTER NODES of a node that is not (yet) a healthy member.
UNHEALTHY = frozenset({"fail", "fail?", "handshake", "noaddr"})


def node_url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


@dataclass(frozen=True)
class ClusterNode:
    """One node as the cluster sees it: its port, role, ID and the slot ranges it serves
    (inclusive ``(first, last)`` pairs; empty for a replica)."""

    port: int
    role: Literal["master", "replica"]
    node_id: str
    slots: tuple[tuple[int, int], ...] = ()
    master_id: str | None = None

    @property
    def url(self) -> str:
        return node_url(self.port)


@dataclass(frozen=True)
class NodeLine:
    """One line of CLUSTER NODES: the node and its flags (``myself``, ``fail?``, ...)."""

    node: ClusterNode
    flags: frozenset[str]


def parse_cluster_nodes(text: str) -> list[NodeLine]:
    """Each line of a CLUSTER NODES reply (migrating/importing markers left out)."""
    lines = []
    for row in text.splitlines():
        parts = row.split()
        if len(parts) < 8:
            continue
        node_id, address, flags, master = parts[:4]
        port = int(address.split("@")[0].rsplit(":", 1)[1] or 0)
        flag_set = frozenset(flags.split(","))
        role: Literal["master", "replica"] = "replica" if "slave" in flag_set else "master"
        ranges = tuple(_slot_range(s) for s in parts[8:] if not s.startswith("["))
        master_id = None if master == "-" else master
        lines.append(NodeLine(ClusterNode(port, role, node_id, ranges, master_id), flag_set))
    return lines


def _slot_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def even_slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The 16384 slots cut into ``masters`` contiguous ranges differing by at most one."""
    bounds = [i * SLOTS // masters for i in range(masters + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(masters)]


Shape = frozenset[tuple[str, str, str | None, tuple[tuple[int, int], ...]]]


def slot_map_shape(view: list[NodeLine], running_ids: set[str]) -> Shape:
    """What all nodes must agree on: who serves which slots, who follows whom. A node that
    is down and serves nothing is left out: its role is what each node last heard."""
    return frozenset(
        (n.node_id, n.role, n.master_id, n.slots)
        for n in (line.node for line in view)
        if n.node_id in running_ids or n.slots
    )


def view_problem(view: list[NodeLine], running_ids: set[str]) -> str | None:
    """Why this view is not ready: a running node it does not know or sees as failing."""
    seen = {line.node.node_id: line for line in view}
    if missing := running_ids - seen.keys():
        return f"does not know {len(missing)} running node(s) yet"
    for node_id in running_ids:
        if bad := seen[node_id].flags & UNHEALTHY:
            return f"sees port {seen[node_id].node.port} as {','.join(sorted(bad))}"
    return None


def coverage_problem(shape: Shape, running_ids: set[str]) -> str | None:
    """Why the agreed map is not ready: a slot served by nobody, or by a node that is down."""
    served = 0
    for node_id, _role, _master, slots in shape:
        if slots and node_id not in running_ids:
            return "a node that is down still serves slots (no replica took over yet)"
        served += sum(last - first + 1 for first, last in slots)
    return None if served == SLOTS else f"{SLOTS - served} slots are not served"


@dataclass
class NodeProcess:
    """One valkey-server process in cluster mode; its directory and ports outlive a kill,
    so a restarted node comes back with its node ID (``nodes.conf``) and its data (AOF)."""

    index: int
    directory: Path
    port: int = 0
    bus_port: int = 0
    node_id: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _client: redis.Redis | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis(
                host="127.0.0.1",
                port=self.port,
                socket_timeout=COMMAND_TIMEOUT,
                socket_connect_timeout=COMMAND_TIMEOUT,
                decode_responses=True,
                retry=Retry(NoBackoff(), 0),  # the callers poll; redis-py would retry 10 times
            )
        return self._client

    def spawn(self, node_timeout_ms: int) -> None:
        self.process = spawn_private(self._command(node_timeout_ms))

    def _command(self, node_timeout_ms: int) -> list[str]:
        return [
            str(binary_path()),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(self.directory / "nodes.conf"),
            "--cluster-node-timeout", str(node_timeout_ms),
            # a replica may always take over (the default refuses one long disconnected)
            "--cluster-replica-validity-factor", "0",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes",
            # written before each reply, so a killed node keeps every acknowledged write
            # (everysec may defer the write up to 2 s while a background fsync runs)
            "--appendfsync", "no",
            "--repl-diskless-sync-delay", "0",  # replicas in sync at once, not after 5 s
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "notice",
            "--logfile", str(self.directory / "node.log"),
        ]  # fmt: skip

    def answers(self, deadline: float) -> bool:
        """Wait until the process answers PING; False if it exited or the deadline passed."""
        while time.monotonic() < deadline and self.alive:
            try:
                return bool(self.client.ping())
            except redis.BusyLoadingError:  # a restarted node reading its AOF
                time.sleep(POLL_INTERVAL)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.drop_client()
                time.sleep(POLL_INTERVAL / 5)
        return False

    def view(self) -> list[NodeLine]:
        """The cluster as this node sees it."""
        return parse_cluster_nodes(str(self.client.execute_command("CLUSTER", "NODES")))

    def state_ok(self) -> bool:
        return "cluster_state:ok" in str(self.client.execute_command("CLUSTER", "INFO"))

    def unlinked_replica(self) -> bool:
        """True for a replica whose link to its master is not up yet."""
        info = self.client.info("replication")
        return bool(info.get("role") == "slave" and info.get("master_link_status") != "up")

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def reap(self, timeout: float = STOP_TIMEOUT) -> None:
        """Wait for the process to end (SIGKILL after ``timeout``); forget it."""
        process, self.process = self.process, None
        if process is not None:
            reap(process, timeout)
        self.drop_client()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None:
            self.process.kill()
        self.reap()

    def drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def log_tail(self) -> str:
        path = self.directory / "node.log"
        text = path.read_text(errors="replace")[-LOG_TAIL:] if path.exists() else "(no log)"
        return f"--- node {self.index} on port {self.port} ---\n{text.strip()}"
