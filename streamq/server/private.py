"""Starting the process of a private embedded server (one node, a cluster's nodes, a
sentinel set's processes), which lives exactly as long as the Python process that owns it.

* In its own session and process group: Ctrl-C in a terminal (SIGINT to the foreground
  process group) is for the program, which stops its servers itself, in order.
* Bound to this process's life (Linux: ``PR_SET_PDEATHSIG``, SIGTERM, set by util-linux's
  ``setpriv``): a parent killed with SIGKILL does not leave its servers running.

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process:
a server started from a worker thread (``anyio.to_thread``'s end when idle) would be
stopped with that thread. So every private server is forked by one spawner thread that
lives as long as the process. The shared server (:mod:`.shared`) is meant to outlive its
starter and is not started here; its keeper binds Valkey to itself the same way.

:class:`PrivateServer` is what every private server's Python side shares: ``with`` starts
and closes it, and so does the end of this process once it has started.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Self

Process = subprocess.Popen[bytes]
Request = tuple[Callable[[], Process], Future[Process]]


def spawn_private(command: list[str]) -> Process:
    """Start ``command`` (stdio to /dev/null) in its own session, to be sent SIGTERM when
    this process dies (on Linux). Raises what ``subprocess.Popen`` raises."""
    return _spawner().run(lambda: _popen(command))


def reap(process: Process, timeout: float) -> None:
    """Wait until ``process`` ends; SIGKILL it after ``timeout`` seconds."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _popen(command: list[str]) -> Process:
    return subprocess.Popen(
        [*_DIE_WITH_PARENT, *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _die_with_parent() -> list[str]:
    """A prefix asking for SIGTERM at the parent's death (Linux, util-linux's ``setpriv``,
    kept across the exec of the server); none elsewhere. Not a ``preexec_fn``: a child
    forked with Python code to run before its exec, from a thread, broke a PySpark
    session of the same process (its data sources were no longer found)."""
    setpriv = shutil.which("setpriv") if sys.platform == "linux" else None
    return [] if setpriv is None else [setpriv, "--pdeathsig", "TERM", "--"]


_DIE_WITH_PARENT = _die_with_parent()


class _Spawner:
    """A daemon thread that forks every private server of this process, and lives until
    the process ends."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._requests: queue.SimpleQueue[Request] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="streamq-server-spawner", daemon=True).start()

    def run(self, call: Callable[[], Process]) -> Process:
        done: Future[Process] = Future()
        self._requests.put((call, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            call, done = self._requests.get()
            try:
                done.set_result(call())
            except BaseException as e:  # handed to the caller, who raises it
                done.set_exception(e)


_spawner_of_process: _Spawner | None = None
_spawner_lock = threading.Lock()


def _spawner() -> _Spawner:
    """This process's spawner (a forked child starts its own: the thread is not copied)."""
    global _spawner_of_process
    with _spawner_lock:
        if _spawner_of_process is None or _spawner_of_process.pid != os.getpid():
            _spawner_of_process = _Spawner()
        return _spawner_of_process


class PrivateServer(ABC):
    """A private embedded server (one node, a cluster, a sentinel set) as its owner holds
    it: ``with`` starts and closes it; :meth:`_close_at_exit` closes it at the latest when
    this process exits."""

    _closes_at_exit = False

    @abstractmethod
    def start(self) -> Self:
        """Start the server's processes; wait until it serves."""

    @abstractmethod
    def close(self) -> None:
        """Stop the server's processes and remove their directory (idempotent)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _close_at_exit(self) -> None:
        if not self._closes_at_exit:
            atexit.register(self.close)
            self._closes_at_exit = True
