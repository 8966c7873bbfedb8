"""Starting the process of a private embedded server (one node, a cluster's nodes, a
sentinel set's processes), which lives exactly as long as the Python process that owns it.

* In its own session and process group: Ctrl-C in a terminal (SIGINT to the foreground
  process group) is for the program, which stops its servers itself, in order.
* Bound to this process's life (Linux: ``PR_SET_PDEATHSIG``, SIGTERM): a parent killed
  with SIGKILL does not leave its servers running.

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process:
a server started from a worker thread (``anyio.to_thread``'s end when idle) would be
stopped with that thread. So every private server is forked by one spawner thread that
lives as long as the process. The shared server (:mod:`.shared`) is meant to outlive its
starter and is not started here; its keeper binds Valkey to itself the same way.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future

PR_SET_PDEATHSIG = 1

Process = subprocess.Popen[bytes]
Request = tuple[Callable[[], Process], Future[Process]]


def spawn_private(command: list[str]) -> Process:
    """Start ``command`` (stdio to /dev/null) in its own session, to be sent SIGTERM when
    this process dies (on Linux). Raises what ``subprocess.Popen`` raises."""
    parent = os.getpid()
    return _spawner().run(lambda: _popen(command, parent))


def _popen(command: list[str], parent: int) -> Process:
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with(parent),
    )


def _die_with(parent: int) -> Callable[[], None] | None:
    """The child's last step before exec: ask for SIGTERM at the parent's death, and exit
    if the parent already died (after the fork, before the request). None off Linux."""
    if sys.platform != "linux":
        return None
    try:  # looked up in the parent: the child only calls it
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None

    def bind() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return bind


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
