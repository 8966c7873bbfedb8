"""What an embedded cluster and an embedded Sentinel set share: valkey-server processes of
one private temporary directory (a directory each), started together, waited on until the
whole set is ready, and stopped together.

:class:`ProcessSet` owns that lifecycle; :class:`~streamq.server.cluster.EmbeddedCluster`
and :class:`~streamq.server.sentinel.EmbeddedSentinel` say which processes the set has,
how they boot and what "ready" means.
"""

from __future__ import annotations

import logging
import shutil
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Self

import redis

from ..errors import ServerUnavailableError
from .cluster_nodes import POLL_INTERVAL, NodeProcess
from .directories import make_private_directory
from .private import PrivateServer


class ProcessSet(PrivateServer):
    """Processes owned by this Python process, in one private directory removed on stop.

    A subclass names itself (``_kind``, in messages), the kind of its directory
    (``_kind_of_directory``: ``streamq-<kind>-...``), and gives :meth:`_processes`,
    :meth:`_boot`, :meth:`_forget` and :meth:`_address`.
    """

    _kind: ClassVar[str]
    _kind_of_directory: ClassVar[str]

    def __init__(self) -> None:
        self._dir: Path | None = None

    @property
    def directory(self) -> Path | None:
        """The private directory of the processes' data and logs (None when stopped)."""
        return self._dir

    @property
    def running(self) -> bool:
        """True while at least one process of the set runs."""
        return any(p.alive for p in self._processes())

    def start(self) -> Self:
        """Start every process and wait until the set is ready."""
        if self.running:
            return self
        began = time.monotonic()
        self._dir = make_private_directory(self._kind_of_directory)
        self._close_at_exit()
        try:
            self._boot()
        except BaseException:
            self.stop()  # interrupted or failed: leave no process behind
            raise
        logging.getLogger(type(self).__module__).info(
            "%s ready in %.2f s: %s", self._kind, time.monotonic() - began, self._address()
        )
        return self

    def stop(self) -> None:
        """End every process and remove the directory (idempotent)."""
        processes = self._processes()
        for process in processes:  # all signalled first: they shut down in parallel
            process.terminate()
        for process in processes:
            process.reap()
        self._forget()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        """The same as :meth:`stop` (as :meth:`EmbeddedServer.close`)."""
        self.stop()

    # -- what a subclass gives -------------------------------------------------------------
    @abstractmethod
    def _processes(self) -> Sequence[NodeProcess]:
        """Every process of the set, in the order they are stopped."""

    @abstractmethod
    def _boot(self) -> None:
        """Start the processes (directories from :meth:`_new_directory`); wait until ready."""

    @abstractmethod
    def _forget(self) -> None:
        """Drop the (stopped) processes."""

    @abstractmethod
    def _address(self) -> object:
        """What the log line of a started set shows: its URL(s)."""

    # -- for the subclasses --------------------------------------------------------------
    def _new_directory(self, name: str) -> Path:
        """A fresh directory for one process, in the set's directory."""
        assert self._dir is not None
        directory = self._dir / name
        directory.mkdir()
        return directory

    def _wait_for(self, problem: Callable[[], str | None], timeout: float, what: str) -> None:
        """Poll ``problem`` until it finds none; after ``timeout`` seconds raise
        :class:`ServerUnavailableError` naming ``what`` went wrong, the last problem and
        the tail of every process's log."""
        deadline = time.monotonic() + timeout
        reason: str | None = "not checked"
        while time.monotonic() < deadline:
            try:
                reason = problem()
            except (redis.RedisError, OSError) as e:
                reason = f"{type(e).__name__}: {e}"
            if reason is None:
                return
            time.sleep(POLL_INTERVAL)
        raise ServerUnavailableError(
            f"{self._kind} {what} after {timeout:.0f} s ({reason}):\n{self._logs()}"
        )

    def _logs(self) -> str:
        return "\n".join(p.log_tail() for p in self._processes())
