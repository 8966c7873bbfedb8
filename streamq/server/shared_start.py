"""Finding and starting the shared embedded server (:mod:`.shared`): its record, whether
it really runs and has loaded its data, its port, and starting its keeper.

Every function here is called with the state directory's file lock held.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServerUnavailableError
from . import keeper
from .binary import binary_path, free_port
from .keeper import Paths, pid_alive, read_info, server_pid, server_state

log = logging.getLogger("streamq.server.shared")  # one logger for the shared server's story

START_ATTEMPTS = 3
KEEPER_ANSWER_TIMEOUT = keeper.STARTUP_TIMEOUT + 5.0
STOP_WAIT = keeper.STOP_TIMEOUT + 2.0


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The running shared server, as its keeper recorded it."""

    url: str
    port: int
    pid: int
    keeper_pid: int
    data_dir: str


def running_info(paths: Paths, *, loaded: bool = True) -> ServerInfo | None:
    """The recorded server if it really runs (its keeper lives and the server on its port
    is the recorded process) and, if ``loaded``, once it has loaded its data (a bounded
    wait; ServerUnavailableError past it); a stale record is cleared. Call with the lock
    held. ``loaded=False``: a loading server counts as running (to stop it, to show it)."""
    info = _parse(read_info(paths))
    if info is None:
        with contextlib.suppress(FileNotFoundError):
            paths.info.unlink()
        return None
    deadline = time.monotonic() + keeper.STARTUP_TIMEOUT  # it may be restarting Valkey
    loading_since: float | None = None
    noticed = False
    while _is_keeper(info.keeper_pid):
        pid, loading = server_state(info.port)
        if pid == info.pid and not (loading and loaded):
            return info
        if loading:  # starting, not stuck: wait (bounded) until its data is loaded
            now = time.monotonic()
            if loading_since is None:
                loading_since = now
                deadline = max(deadline, now + keeper.LOAD_TIMEOUT)
            elif not noticed and now - loading_since >= keeper.LOADING_NOTICE:
                _say_loading(paths, info)
                noticed = True
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
        info = _parse(read_info(paths)) or info
    if loading_since is not None and _is_keeper(info.keeper_pid):
        raise ServerUnavailableError(_still_loading(paths, info, time.monotonic() - loading_since))
    _clear_stale(paths, info)
    return None


def _say_loading(paths: Paths, info: ServerInfo) -> None:
    log.warning(
        "waiting for the shared server %s to load its data (%s in %s), at most %gs",
        info.url, _data_size(paths), paths.data, keeper.LOAD_TIMEOUT,
    )  # fmt: skip


def _still_loading(paths: Paths, info: ServerInfo, waited: float) -> str:
    return (
        f"the shared embedded server {info.url} is still loading its data after {waited:.0f}s "
        f"({_data_size(paths)} in {paths.data}); try again later, or stop it "
        f"(streamq server stop) and make its data smaller"
    )


def _data_size(paths: Paths) -> str:
    total = sum(f.stat().st_size for f in paths.data.rglob("*") if f.is_file())
    return f"{total / 1e6:.1f} MB"


def _parse(raw: dict[str, Any] | None) -> ServerInfo | None:
    if raw is None:
        return None
    try:
        return ServerInfo(
            str(raw["url"]), int(raw["port"]), int(raw["pid"]), int(raw["keeper_pid"]),
            str(raw["data_dir"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _is_keeper(pid: int) -> bool:
    """Alive and, where /proc tells, really a keeper (not a recycled pid)."""
    if not pid_alive(pid):
        return False
    if not Path("/proc/self").is_dir():  # no /proc (macOS): trust the pid
        return True
    try:
        return b"keeper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return False


def _clear_stale(paths: Paths, info: ServerInfo) -> None:
    """A record whose server does not answer or whose keeper is gone: stop what is left of
    it (a keeper that cannot bring Valkey back, an orphaned Valkey), drop the record."""
    if _is_keeper(info.keeper_pid):
        log.warning("the shared server's keeper (pid %d) is stuck: stopping it", info.keeper_pid)
        terminate(info.keeper_pid)
    elif server_pid(info.port) == info.pid:
        log.warning("stopping the orphaned shared server (pid %d) left by a dead keeper", info.pid)
        terminate(info.pid)
    with contextlib.suppress(FileNotFoundError):
        paths.info.unlink()


def terminate(pid: int, timeout: float = STOP_WAIT) -> None:
    """SIGTERM ``pid`` (not our child) and wait for it to be gone; SIGKILL after ``timeout``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.01)


def preferred_port(paths: Paths) -> int:
    """The server's recorded port (so that URLs held by running users keep working after
    a restart), else a free one; a recorded port another program took meanwhile is said."""
    try:
        last = int(paths.last_port.read_text())
    except (OSError, ValueError):
        return free_port()
    if port_free(last):
        return last
    port = free_port()
    log.warning(
        "the shared server's port %d is taken by another program: starting it on %d "
        "(running users of the old port must be restarted)", last, port,
    )  # fmt: skip
    return port


def port_free(port: int) -> bool:
    """Whether a server can listen on ``port``: bound with address reuse, as Valkey does,
    so that connections of the last run still in TIME_WAIT do not push it elsewhere."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_keeper(paths: Paths, port: int) -> ServerInfo:
    """Start a keeper (and so Valkey) on ``port``; raises ServerUnavailableError if it
    does not answer ``ready``. Call with the lock held."""
    command = [  # -I: no script directory, user site or PYTHON* variables on its path
        sys.executable, "-I", keeper.__file__,
        "--home", str(paths.home), "--binary", str(binary_path()), "--port", str(port),
    ]  # fmt: skip
    with open(paths.keeper_log, "ab") as errors:
        starter = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
            cwd=paths.home, start_new_session=True,
        )  # fmt: skip
    assert starter.stdout is not None
    with starter.stdout:
        starter.wait()  # the intermediate process exits at once; the keeper answers
        lines = _Lines(starter.stdout.fileno())
        answer = lines.read(KEEPER_ANSWER_TIMEOUT)
        if answer == "loading":  # Valkey runs and loads its data: ready once loaded
            log.warning(
                "the shared server on port %d is loading its data (%s in %s); waiting, at "
                "most %gs", port, _data_size(paths), paths.data, keeper.LOAD_TIMEOUT,
            )  # fmt: skip
            answer = lines.read(keeper.LOAD_TIMEOUT + 5.0)
    info = running_info(paths) if answer == "ready" else None
    if info is None:
        raise ServerUnavailableError(
            f"the shared embedded server did not start: {answer or 'no answer'} "
            f"(see {paths.keeper_log})"
        )
    return info


class _Lines:
    """The lines the keeper writes on a pipe, one at a time, each within a timeout."""

    def __init__(self, fd: int) -> None:
        self.fd, self.data = fd, b""

    def read(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.data and (left := deadline - time.monotonic()) > 0:
                if not selector.select(left):
                    break
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    break
                self.data += chunk
        line, _, self.data = self.data.partition(b"\n")
        return line.decode(errors="replace").strip()
