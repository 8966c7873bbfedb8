"""A real PostgreSQL server for `make demo-exactly-once` and the tests, started from
Debian's ``postgresql`` binaries (``initdb`` and ``pg_ctl`` of
``/usr/lib/postgresql/<version>/bin``) in a temporary folder: no system service, a free
loopback port, trust authentication, fsync off.

``initdb`` refuses to run as root: as root the server runs as ``nobody`` (``runuser``), in
a folder given to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

USER = "streamq"  # the database superuser initdb makes
START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections


def postgres_bin() -> Path | None:
    """The newest installed ``/usr/lib/postgresql/<version>/bin`` with ``initdb``."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not found:
        return None
    return Path(max(found, key=lambda p: int(Path(p).parts[-3]))).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_server_user(args: list[str]) -> list[str]:
    """``args`` run as ``nobody`` when we are root (initdb and postgres refuse root)."""
    return ["runuser", "-u", "nobody", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """Run a PostgreSQL server until the block ends; yield its URL (database
    ``postgres``). Raises RuntimeError, with the server's log, if it does not start."""
    folder = Path(tempfile.mkdtemp(prefix="streamq-pg-"))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    data, log, port = folder / "data", folder / "log", _free_port()
    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
              "--no-sync", "-E", "UTF8", "--locale=C"], folder)  # fmt: skip
        options = (f"-c listen_addresses=127.0.0.1 -c port={port} "
                   f"-c unix_socket_directories={folder} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")  # fmt: skip
        _run([str(bin_dir / "pg_ctl"), "start", "-w", "-t", str(START_TIMEOUT), "-D", str(data),
              "-l", str(log), "-o", options], folder)  # fmt: skip
        try:
            yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
        finally:
            _run([str(bin_dir / "pg_ctl"), "stop", "-m", "immediate", "-D", str(data)], folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(args: list[str], folder: Path) -> None:
    """Run ``args`` in a session of their own: a Ctrl-C at the terminal reaches the caller
    (whose clean-up stops the server), not ``initdb`` or ``pg_ctl`` halfway."""
    done = subprocess.run(
        _as_server_user(args), capture_output=True, text=True, cwd=folder, start_new_session=True
    )
    if done.returncode != 0:
        log = folder / "log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr[-2000:]}{tail}")
