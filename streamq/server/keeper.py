"""The keeper of the shared embedded server: one small process that owns the Valkey server
every default user on the machine reaches, and stops it when its last user has gone.

It runs as a script (``python keeper.py --home H --binary B --port P``), stdlib only, so it
starts in milliseconds without importing streamq. It detaches (new session, double fork:
never a zombie of the process that started it), starts Valkey with AOF in ``<home>/data``,
writes ``server.json`` and answers ``ready`` on its stdout once Valkey has loaded its data
(before that it answers ``LOADING`` to every command: it is starting, not ready; the keeper
says ``loading`` first when that takes a while). Then, every ``SCAN_INTERVAL``:

* a Valkey that died is started again on the same port and data (with backoff);
* the users' leases are checked: a lease is a file under ``<home>/server/users`` that its
  process holds an ``flock`` on for as long as it lives, so the kernel frees it at any
  death, SIGKILL included. When no lease is held any more, Valkey is stopped and the
  keeper exits: the last user's crash does not leave an orphan behind.

SIGTERM stops Valkey (which flushes its AOF) and the keeper at once (``streamq server
stop``, or the last user leaving). Valkey is bound to the keeper's life with
``PR_SET_PDEATHSIG`` on Linux, so a SIGKILLed keeper does not leave it running either.

The user side (starting a keeper under the file lock, leases) is :mod:`streamq.server.shared`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCAN_INTERVAL = 0.5
STARTUP_TIMEOUT = 10.0
LOAD_TIMEOUT = 120.0  # a server's data (AOF) loaded within this, or it is not started
LOADING_NOTICE = 1.0  # a load that takes longer is worth a line to the users who wait
STOP_TIMEOUT = 10.0
RESTART_BACKOFF = 0.5
MAX_RESTART_BACKOFF = 10.0
MAX_FAILED_RESTARTS = 5


class Paths:
    """Where the shared server keeps its state under ``home``."""

    def __init__(self, home: str | Path) -> None:
        self.home = Path(home)
        self.server = self.home / "server"
        self.lock = self.server / "lock"
        self.info = self.server / "server.json"
        self.last_port = self.server / "port"  # the server's port, kept across restarts
        self.stopped = self.server / "stopped"  # stopped on purpose: running users leave it so
        self.users = self.server / "users"
        self.keeper_log = self.server / "keeper.log"
        self.data = self.home / "data"

    def create(self) -> None:
        for directory in (self.home, self.server, self.users, self.data):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)


@contextlib.contextmanager
def file_lock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold ``flock`` on ``path`` for the block; yields False if not blocking and busy."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def live_leases(users: Path) -> list[Path]:
    """Leases whose process still holds them; the others are removed on the way."""
    live = []
    for path in sorted(users.glob("*.lease")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live.append(path)
        else:  # nobody holds it: its process is gone
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        finally:
            os.close(fd)
    return live


def read_info(paths: Paths) -> dict[str, Any] | None:
    try:
        info = json.loads(paths.info.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie does not (it waits for an init that may reap late)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone meanwhile, or no /proc
        return Path("/proc").is_dir() is False
    return state not in ("Z", "X")


def server_pid(port: int, timeout: float = 1.0) -> int | None:
    """The ``process_id`` of the Redis-protocol server on 127.0.0.1:``port``, or None."""
    return server_state(port, timeout)[0]


def server_state(port: int, timeout: float = 1.0) -> tuple[int | None, bool]:
    """The ``process_id`` of the Redis-protocol server on 127.0.0.1:``port`` (None if none
    answers) and whether it is still loading its data (``INFO`` answers while it loads;
    every data command gets ``LOADING``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nINFO\r\n")
            reply = b""
            while b"\r\n" not in reply or len(reply) < _bulk_length(reply):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None, False
    pid, loading = None, False
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("process_id:"):
            pid = int(line.split(":", 1)[1])
        elif line.startswith("loading:"):
            loading = line.split(":", 1)[1].strip() != "0"
    return pid, loading


def _bulk_length(reply: bytes) -> int:
    """Bytes of a complete ``$<n>\\r\\n<n bytes>\\r\\n`` reply (a large number until known)."""
    header, sep, _ = reply.partition(b"\r\n")
    if not sep or not header.startswith(b"$"):
        return len(reply)  # an error reply or garbage: stop reading
    return len(header) + 2 + int(header[1:]) + 2


def _bind_to_parent() -> None:
    """In the Valkey child: receive SIGTERM when the keeper dies (Linux only)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


class Stop(Exception):
    """Raised by the SIGTERM handler: stop Valkey, then exit."""


class Keeper:
    """Starts Valkey, keeps it alive while leases are held, stops it after the last one."""

    def __init__(self, paths: Paths, binary: str, port: int) -> None:
        self.paths, self.binary, self.port = paths, binary, port
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.paths.data),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.paths.data / "valkey.log"),
        ]  # fmt: skip

    def start_valkey(self) -> bool:
        """Start Valkey and wait until it answers; False if it exited or never did."""
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_bind_to_parent,  # safe: the keeper has no threads
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if server_pid(self.port, timeout=0.5) == self.process.pid:
                return True
            time.sleep(0.01)
        self.stop_valkey()
        return False

    def wait_loaded(self) -> bool:
        """Wait until Valkey has loaded its data (at most ``LOAD_TIMEOUT``); False if it
        exited or did not finish in time. Says ``loading`` to the starter if it must wait."""
        began = time.monotonic()
        deadline, said = began + LOAD_TIMEOUT, False
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            pid, loading = server_state(self.port, timeout=1.0)
            if pid == self.process.pid and not loading:
                return True
            if loading and not said and time.monotonic() - began > LOADING_NOTICE:
                _say("loading")
                said = True
            time.sleep(0.02)
        return False

    def stop_valkey(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # Valkey flushes its AOF on SIGTERM
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def publish_info(self) -> None:
        assert self.process is not None
        info = {
            "keeper_pid": os.getpid(),
            "pid": self.process.pid,
            "port": self.port,
            "url": f"redis://127.0.0.1:{self.port}/0",
            "data_dir": str(self.paths.data),
            "started_at": time.time(),
        }
        write_atomically(self.paths.info, json.dumps(info))
        write_atomically(self.paths.last_port, str(self.port))

    def withdraw_info(self) -> None:
        info = read_info(self.paths)
        if info is not None and info.get("keeper_pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.paths.info.unlink()

    def watch(self) -> None:
        """Until no lease is held (or SIGTERM): restart a dead Valkey, reap dead leases."""
        failures, backoff = 0, RESTART_BACKOFF
        while True:
            time.sleep(SCAN_INTERVAL)
            if self.process is not None and self.process.poll() is not None:
                log(f"valkey exited with code {self.process.returncode}; restarting it")
                if self.start_valkey():
                    failures, backoff = 0, RESTART_BACKOFF
                    self.publish_info()
                else:
                    failures += 1
                    if failures >= MAX_FAILED_RESTARTS:
                        log("valkey does not start again; giving up")
                        return
                    time.sleep(backoff)
                    backoff = min(backoff * 2, MAX_RESTART_BACKOFF)
                    continue
            with file_lock(self.paths.lock, blocking=False) as locked:
                if locked and not live_leases(self.paths.users):
                    log("no user left: stopping")
                    self.stop_valkey()
                    self.withdraw_info()
                    return


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} keeper {os.getpid()}: {message}", file=sys.stderr)


def _daemonize() -> None:
    """Leave the starter: the intermediate process exits at once, so the keeper is nobody's
    child to reap (no zombie, no "still running" warning in the starter)."""
    if os.fork() > 0:
        os._exit(0)


def _on_sigterm(signum: int, frame: object) -> None:
    raise Stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--home", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    _daemonize()
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the users
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    keeper = Keeper(Paths(args.home), args.binary, args.port)
    try:
        if not keeper.start_valkey():
            tail = _tail(keeper.paths.data / "valkey.log")
            _answer(f"error: valkey did not start on port {args.port}: {tail}")
            return 1
        keeper.publish_info()  # users find it (and wait while it loads) from now on
        if not keeper.wait_loaded():
            _answer(f"error: valkey did not load its data within {LOAD_TIMEOUT:g}s")
            return 1
        log(f"valkey {keeper.process.pid if keeper.process else '?'} on port {args.port}")
        _answer("ready")
        keeper.watch()
    except Stop:
        log("SIGTERM: stopping")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time, to the end
        keeper.stop_valkey()
        keeper.withdraw_info()
    return 0


def _say(line: str) -> None:
    """One line to the starter on stdout (gone already: nothing to tell)."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise


def _answer(line: str) -> None:
    """Tell the starter (one line on stdout), then let go of its pipe."""
    _say(line)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-300:].strip().replace("\n", " | ")
    except OSError:
        return "no log"


if __name__ == "__main__":
    sys.exit(main())
