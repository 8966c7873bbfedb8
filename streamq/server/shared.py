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
  data: never a duplicate, never a pile of orphans. The port is kept for the server's life
  and across restarts (``server/port``), so running clients reconnect by themselves; a
  running user whose connection is refused starts it again itself
  (:mod:`streamq.wire.revival`), unless it was stopped on purpose (``streamq server stop``).
* Ready means loaded: a server that answers ``LOADING`` is starting, and users wait for
  it (at most ``keeper.LOAD_TIMEOUT``, saying so when it takes a while).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from ..errors import ConfigError, ServerUnavailableError
from ..wire import revival
from .keeper import Paths, file_lock, live_leases
from .shared_start import (
    START_ATTEMPTS,
    ServerInfo,
    port_free,
    preferred_port,
    running_info,
    start_keeper,
    terminate,
)

log = logging.getLogger(__name__)

ENV_HOME = "STREAMQ_HOME"
REVIVE_QUIET = 1.0  # after a revival that could not be, connections fail without one


def state_home() -> Path:
    """``$STREAMQ_HOME``, else ``$XDG_STATE_HOME/streamq``, else ``~/.local/state/streamq``."""
    explicit = os.environ.get(ENV_HOME)
    if explicit:
        return Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "streamq"


def stop_server(home: Path | None = None) -> ServerInfo | None:
    """Stop the shared server of ``home`` whoever uses it (``streamq server stop``);
    return what was stopped, or None if it was not running."""
    paths = Paths(home or state_home())
    if not paths.server.exists():
        return None
    with file_lock(paths.lock):
        paths.stopped.touch()  # on purpose: its running users do not start it again
        info = running_info(paths, loaded=False)
        if info is not None:
            terminate(info.keeper_pid)
    return info


def server_status(home: Path | None = None) -> tuple[ServerInfo | None, int]:
    """The running server (or None) and how many processes hold a lease on it."""
    paths = Paths(home or state_home())
    if not paths.server.exists():
        return None, 0
    with file_lock(paths.lock):
        return running_info(paths, loaded=False), len(live_leases(paths.users))


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
        self._revive_lock = threading.Lock()
        self._quiet_until = 0.0

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
            elif self.port and info.port != self.port:
                raise ConfigError(
                    f"the shared server already runs on port {info.port}, not {self.port}: "
                    "use its URL, stop it first (streamq server stop), or start a server of "
                    "your own (streamq server --private --port PORT)"
                )
            if self._lease is None:
                self._lease = _take_lease(self.paths.users)
        self.info = info
        return info.url

    def _start(self) -> ServerInfo:
        with contextlib.suppress(FileNotFoundError):
            self.paths.stopped.unlink()  # started again: running users may revive it again
        if self.port:  # asked for: that port or an error, never another one
            if not port_free(self.port):
                raise ServerUnavailableError(f"port {self.port} is taken: cannot start the "
                                             "shared server there")  # fmt: skip
            return start_keeper(self.paths, self.port)
        last_error: ServerUnavailableError | None = None
        for _ in range(START_ATTEMPTS):
            try:
                return start_keeper(self.paths, preferred_port(self.paths))
            except ServerUnavailableError as e:  # e.g. the port was taken meanwhile
                last_error = e
        assert last_error is not None
        raise last_error

    def revive(self) -> bool:
        """A connection to this server was refused: if its keeper died (SIGKILL, OOM) and
        nobody stopped it on purpose, start it again on its port, under the file lock (so
        that of all the users noticing at once one starts it and the others find it).
        True if it runs on its port (again): connecting is worth another try."""
        with self._revive_lock:
            if self._lease is None or self.info is None or time.monotonic() < self._quiet_until:
                return False
            port = self.info.port
            try:
                with file_lock(self.paths.lock):
                    if self.paths.stopped.exists():  # streamq server stop: it stays so
                        info = None
                    else:
                        info = running_info(self.paths) or self._start_again(port)
            except (ServerUnavailableError, OSError) as e:
                log.warning("the shared server on port %d is down and did not start: %s", port, e)
                info = None
            if info is None or info.port != port:
                self._quiet_until = time.monotonic() + REVIVE_QUIET
                return False
            return True

    def _start_again(self, port: int) -> ServerInfo:
        log.warning("the shared server on port %d is gone with its keeper: starting it again", port)
        return start_keeper(self.paths, port)

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
                info = running_info(self.paths, loaded=False)
                if info is not None:
                    log.info("last user of the shared server left: stopping it")
                    terminate(info.keeper_pid)
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
        if first and server.info is not None:  # refused later: maybe its keeper died
            revival.register("127.0.0.1", server.info.port, server.revive)
    if first:
        how = "started by this process" if server.started_here else "already running"
        log.info("using the shared embedded server %s (data in %s; %s)", url, server.data_dir, how)
    return url


def release_all() -> None:
    """Give back this process's leases (at exit; the last user stops the server)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    revival.clear()
    for server in servers:
        try:
            server.release()
        except OSError as e:  # at exit: say it, do not fail
            log.warning("could not release the shared server: %s", e)


def _after_fork_in_child() -> None:
    global _servers_lock
    _servers_lock = threading.Lock()
    revival.clear()
    for server in _servers.values():
        server.forget()
    _servers.clear()


atexit.register(release_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
