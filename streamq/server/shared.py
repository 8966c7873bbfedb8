"""The shared embedded server: the default when no URL is given.

Every process of a user that needs the default (two ``uvicorn --workers``, a ``streamq run
--workers 4``, a CLI call beside a service) reaches the same Valkey server, so work is never
silently split between private servers. Its state lives in ``$STREAMQ_HOME`` (default
``$XDG_STATE_HOME/streamq``, i.e. ``~/.local/state/streamq``): the data (AOF) in ``data/``,
the bookkeeping in ``server/``.

* The first process that needs it starts it, under an ``flock`` on ``server/lock``, so two
  processes starting at once never make two servers.
* Each process using it holds a *lease* (a file it keeps ``flock``-ed while it lives) and
  gives it back at exit; the last one to leave stops the server. A user that dies without
  leaving (SIGKILL) loses its lease with its life: the keeper process
  (:mod:`streamq.server.keeper`) notices and stops the server once no lease is held.
* After a crash (of a user, of the keeper or of Valkey) the next user finds the recorded
  server still answering and reuses it, or starts it again on the same port and the same
  data: never a duplicate, never a pile of orphans.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import ServerUnavailableError
from . import keeper
from .binary import binary_path, free_port
from .keeper import Paths, file_lock, live_leases, pid_alive, read_info, server_pid

log = logging.getLogger(__name__)

ENV_HOME = "STREAMQ_HOME"
START_ATTEMPTS = 3
KEEPER_ANSWER_TIMEOUT = keeper.STARTUP_TIMEOUT + 5.0
STOP_WAIT = keeper.STOP_TIMEOUT + 2.0


def state_home() -> Path:
    """``$STREAMQ_HOME``, else ``$XDG_STATE_HOME/streamq``, else ``~/.local/state/streamq``."""
    explicit = os.environ.get(ENV_HOME)
    if explicit:
        return Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "streamq"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The running shared server, as its keeper recorded it."""

    url: str
    port: int
    pid: int
    keeper_pid: int
    data_dir: str


def running_info(paths: Paths) -> ServerInfo | None:
    """The recorded server if it really runs (its keeper lives and the server on its port
    is the recorded process); a stale record is cleared. Call with the lock held."""
    info = _parse(read_info(paths))
    if info is None:
        with contextlib.suppress(FileNotFoundError):
            paths.info.unlink()
        return None
    deadline = time.monotonic() + keeper.STARTUP_TIMEOUT  # it may be restarting Valkey
    while _is_keeper(info.keeper_pid):
        if server_pid(info.port) == info.pid:
            return info
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
        info = _parse(read_info(paths)) or info
    _clear_stale(paths, info)
    return None


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
        _terminate(info.keeper_pid)
    elif server_pid(info.port) == info.pid:
        log.warning("stopping the orphaned shared server (pid %d) left by a dead keeper", info.pid)
        _terminate(info.pid)
    with contextlib.suppress(FileNotFoundError):
        paths.info.unlink()


def _terminate(pid: int, timeout: float = STOP_WAIT) -> None:
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


def _preferred_port(paths: Paths, wanted: int | None) -> int:
    """The port asked for, else the last one used (so that URLs held by users keep
    working after a restart), else a free one."""
    if wanted:
        return wanted
    try:
        last = int(paths.last_port.read_text())
    except (OSError, ValueError):
        return free_port()
    return last if _port_free(last) else free_port()


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
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
        answer = _read_line(starter.stdout.fileno(), KEEPER_ANSWER_TIMEOUT)
    info = running_info(paths) if answer == "ready" else None
    if info is None:
        raise ServerUnavailableError(
            f"the shared embedded server did not start: {answer or 'no answer'} "
            f"(see {paths.keeper_log})"
        )
    return info


def _read_line(fd: int, timeout: float) -> str:
    data = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in data and (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace").strip()


def stop_server(home: Path | None = None) -> ServerInfo | None:
    """Stop the shared server of ``home`` whoever uses it (``streamq server stop``);
    return what was stopped, or None if it was not running."""
    paths = Paths(home or state_home())
    if not paths.server.exists():
        return None
    with file_lock(paths.lock):
        info = running_info(paths)
        if info is not None:
            _terminate(info.keeper_pid)
    return info


def server_status(home: Path | None = None) -> tuple[ServerInfo | None, int]:
    """The running server (or None) and how many processes hold a lease on it."""
    paths = Paths(home or state_home())
    if not paths.server.exists():
        return None, 0
    with file_lock(paths.lock):
        return running_info(paths), len(live_leases(paths.users))


class SharedServer:
    """This process's use of the shared server of one state directory.

    ``attach()`` returns its URL, starting it if needed, and holds a lease until
    ``release()``, which stops the server if this was its last user. ``port`` is used only
    when this call starts it.
    """

    def __init__(self, home: Path | str | None = None, *, port: int | None = None) -> None:
        self.paths = Paths(home or state_home())
        self.port = port
        self.info: ServerInfo | None = None
        self.started_here = False
        self.announced = False
        self._lease: tuple[int, Path] | None = None

    @property
    def url(self) -> str:
        if self.info is None:
            raise ServerUnavailableError("not attached: call attach() first")
        return self.info.url

    @property
    def data_dir(self) -> Path:
        return self.paths.data

    def attach(self, *, start: bool = True) -> str | None:
        """Reach the shared server, starting it if nobody runs it (unless ``start`` is
        False: then None when it is not running); return its URL."""
        self.paths.create()
        with file_lock(self.paths.lock):
            info = running_info(self.paths)
            if info is None:
                if not start:
                    return None
                info = self._start()
                self.started_here = True
            if self._lease is None:
                self._lease = _take_lease(self.paths.users)
        self.info = info
        return info.url

    def _start(self) -> ServerInfo:
        last_error: ServerUnavailableError | None = None
        for attempt in range(START_ATTEMPTS):
            port = _preferred_port(self.paths, self.port if attempt == 0 else None)
            try:
                return start_keeper(self.paths, port)
            except ServerUnavailableError as e:  # e.g. the port was taken meanwhile
                last_error = e
        assert last_error is not None
        raise last_error

    def release(self) -> None:
        """Give the lease back; the last user stops the server."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        fd, path = lease
        with file_lock(self.paths.lock):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.close(fd)
            if not live_leases(self.paths.users):
                info = running_info(self.paths)
                if info is not None:
                    log.info("last user of the shared server left: stopping it")
                    _terminate(info.keeper_pid)
        self.info = None

    def forget(self) -> None:
        """In a forked child: drop the inherited lease without touching the parent's."""
        lease, self._lease = self._lease, None
        if lease is not None:
            os.close(lease[0])

    def __enter__(self) -> SharedServer:
        self.attach()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _take_lease(users: Path) -> tuple[int, Path]:
    """A lease file, locked before it gets the name the keeper looks for (so it is never
    seen unlocked)."""
    name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = users / f".{name}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, " ".join([str(os.getpid()), *sys.argv]).encode(errors="replace")[:4096])
    final = users / f"{name}.lease"
    os.rename(tmp, final)
    return fd, final


# -- the process's own use, behind default_url() --------------------------------------
_servers: dict[Path, SharedServer] = {}
_servers_lock = threading.Lock()


def shared_url() -> str:
    """The URL of the shared server of ``state_home()``, started if needed; this process
    holds a lease on it until exit. Logged once at INFO with the data directory."""
    url = _attach(start=True)
    assert url is not None
    return url


def running_shared_url() -> str | None:
    """Like :func:`shared_url`, but None instead of starting a server nobody runs (for
    one-shot commands: ``streamq info`` does not start a server to find nothing in it)."""
    return _attach(start=False)


def _attach(*, start: bool) -> str | None:
    home = state_home()
    with _servers_lock:
        server = _servers.get(home) or SharedServer(home)
        url = server.attach(start=start)
        if url is None:
            return None
        first = _servers.setdefault(home, server) is server and not server.announced
        server.announced = True
    if first:
        how = "started by this process" if server.started_here else "already running"
        log.info("using the shared embedded server %s (data in %s; %s)", url, server.data_dir, how)
    return url


def release_all() -> None:
    """Give back this process's leases (at exit; the last user stops the server)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        try:
            server.release()
        except OSError as e:  # at exit: say it, do not fail
            log.warning("could not release the shared server: %s", e)


def _after_fork_in_child() -> None:
    global _servers_lock
    _servers_lock = threading.Lock()
    for server in _servers.values():
        server.forget()
    _servers.clear()


atexit.register(release_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
