"""The soak's processes: its own Valkey server and the consumer subprocesses.

Everything here blocks (process start, wait, select); the async runner calls it through
``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from streamq.server import binary_path, free_port
from streamq.server.private import reap

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0  # a restart replays the AOF first
STOP_TIMEOUT = 20.0
STATS_TIMEOUT = 5.0


class SoakServer:
    """A Valkey server with AOF and ``appendfsync always`` (an acknowledged write is on disk
    before the reply, so it survives a SIGKILL), always on the same port and directory."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> SoakServer:
        command = [
            str(binary_path()), "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
            "--appendfsync", "always", "--daemonize", "no", "--loglevel", "notice",
            "--logfile", str(self.dir / "server.log"),
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if self._answers_ping():
                return self
            time.sleep(0.02)
        raise RuntimeError(f"soak server did not start on port {self.port}; see {self.dir}")

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")  # "-LOADING" while replaying
        except OSError:
            return False

    def send_signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the server process (SIGSTOP/SIGCONT: a stall)."""
        if self._process is not None:
            self._process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; keeps the data directory."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            reap(process, STOP_TIMEOUT)


def spawn(module: str, args: list[str], log_path: Path) -> subprocess.Popen[str]:
    """``python -m module args...`` from the repository root; stderr appended to log_path."""
    with open(log_path, "a", encoding="utf-8") as log:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip


def read_line(process: subprocess.Popen[str], timeout: float) -> str | None:
    """The next stdout line of ``process``, or None after ``timeout``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else None


def finish(process: subprocess.Popen[str], timeout: float = STOP_TIMEOUT) -> str:
    """Wait for ``process`` to exit (SIGKILL after ``timeout``); return its remaining stdout."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output or ""


def kill_all(processes: list[subprocess.Popen[str]]) -> None:
    """SIGKILL (and reap) every process of the list still running."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            finish(process)


class Consumers:
    """The consumer processes, one per slot; names ``c<slot>`` or ``c<slot>-r<n>``."""

    def __init__(
        self, url: str, stream: str, *, count: int, seed: int, fail_rate: float, run_dir: Path,
        mode: str = "plain", database: str = "",
    ) -> None:  # fmt: skip
        self._url, self._stream, self._seed, self._fail_rate = url, stream, seed, fail_rate
        self._mode, self._database = mode, database
        self._run_dir = run_dir
        self.names = {slot: f"c{slot}" for slot in range(count)}
        self.processes: dict[int, subprocess.Popen[str]] = {}
        self.spawned = 0

    def start(self, slot: int) -> None:
        """Start the slot's consumer under its current name; raise if it is not ready."""
        self.spawned += 1
        name = self.names[slot]
        process = spawn(
            "tests.soak.soak_consumer",
            [
                self._url,
                self._stream,
                name,
                str(self._seed + self.spawned),
                str(self._fail_rate),
                self._mode,
                str(self._run_dir),
                self._database,
            ],
            self._run_dir / f"consumer-{name}.log",
        )
        self.processes[slot] = process
        if read_line(process, STARTUP_TIMEOUT) != "ready":
            raise RuntimeError(f"consumer {name} did not start; see {self._run_dir}")

    def start_all(self) -> None:
        for slot in self.names:
            self.start(slot)

    def kill(self, slot: int, new_name: bool) -> str:
        """SIGKILL the slot's consumer and start it again; return what was done."""
        old = self.names[slot]
        self.processes[slot].kill()
        finish(self.processes[slot])
        if new_name:
            self.names[slot] = f"c{slot}-r{self.spawned}"
        self.start(slot)
        return f"SIGKILL {old}, restarted as {self.names[slot]}"

    def signal(self, slot: int, signum: signal.Signals) -> None:
        self.processes[slot].send_signal(signum)

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]

    def restart_exited(self) -> list[str]:
        """Consumers that exited on their own (a finding): reported and started again."""
        exits = []
        for slot, process in self.processes.items():
            if process.poll() is not None:
                output = finish(process).strip().replace("\n", " | ")
                exits.append(f"{self.names[slot]} exited with {process.returncode}: {output}")
                self.start(slot)
        return exits

    def stats(self) -> dict[str, dict[str, int]]:
        """Each consumer's counters (``MessageQueue.stats()``), asked for with SIGUSR1."""
        found = {}
        for slot, process in self.processes.items():
            process.send_signal(signal.SIGUSR1)
            line = read_line(process, STATS_TIMEOUT) or ""
            if line.startswith("stats "):
                found[self.names[slot]] = json.loads(line.removeprefix("stats "))
        return found

    def stop_all(self) -> list[str]:
        """SIGTERM every consumer; return the ones that did not stop cleanly."""
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        problems = []
        for slot, process in self.processes.items():
            output = finish(process)
            if process.returncode != 0 or "stopped: signal" not in output:
                name = self.names[slot]
                problems.append(f"{name} exit {process.returncode} on SIGTERM: {output.strip()}")
        return problems
