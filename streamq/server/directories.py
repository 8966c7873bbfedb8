"""The temporary directories of private embedded servers, and the removal of those whose
owner died without closing them.

A private server's directory is removed by its ``close()`` (or at the exit of its owner).
An owner killed with SIGKILL cannot do that, so each directory's name says who owns it,
``streamq-<kind>-<pid>-<start>-<namespace>-<random>`` (``<start>``: the owner's start
time, so that a reused PID is not taken for the owner; ``<namespace>``: its PID namespace,
so that a container sharing the temporary directory does not judge the PIDs of another),
and :func:`remove_orphaned` removes the directories whose owner is gone: every private
server calls it when it starts, and the pytest plugin when a test session ends.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

KINDS = ("valkey", "cluster", "sentinel")
_NAME = re.compile(r"^streamq-(?:valkey|cluster|sentinel)-(\d+)-(\d+)-(\d+)-")
_PROC = Path("/proc")


def make_private_directory(kind: str) -> Path:
    """A new temporary directory for a private server of ``kind`` owned by this process
    (after removing the directories that dead owners left)."""
    assert kind in KINDS, kind
    remove_orphaned()
    pid = os.getpid()
    prefix = f"streamq-{kind}-{pid}-{_start_time(pid) or 0}-{_pid_namespace()}-"
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_orphaned(parent: Path | None = None) -> list[Path]:
    """Remove the private servers' directories in ``parent`` (the temporary directory by
    default) whose owner is no longer running; return them. Directories of live owners,
    of other users and of names not made by :func:`make_private_directory` are left."""
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith("streamq-")]
    except OSError:
        return []
    removed = [p for p in candidates if _is_orphaned(p) and _remove(p)]
    if removed:
        log.debug("removed %d directories of dead embedded servers' owners", len(removed))
    return removed


def _is_orphaned(directory: Path) -> bool:
    match = _NAME.match(directory.name)
    if match is None:
        return False
    try:
        if directory.lstat().st_uid != os.getuid() or not directory.is_dir():
            return False
    except OSError:
        return False
    pid, start, namespace = (int(group) for group in match.groups())
    return namespace == _pid_namespace() and not _is_running(pid, start)


def _is_running(pid: int, start: int) -> bool:
    """Whether process ``pid`` runs and started at ``start`` (when that is known)."""
    now = _start_time(pid)
    if now is not None:
        return start in (0, now)
    if _PROC.is_dir():
        return False  # Linux: no /proc/<pid>, no process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_namespace() -> int:
    """This process's PID namespace (Linux: the inode of ``/proc/self/ns/pid``), else 0."""
    try:
        return (_PROC / "self" / "ns" / "pid").stat().st_ino
    except OSError:
        return 0


def _start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (Linux), else None (also for
    a process that has ended but is not yet reaped: a zombie)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the fields after the command name (which may hold spaces and parentheses);
    # starttime is field 22, the 20th after the name
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X") or not fields[19].isdigit():
        return None
    return int(fields[19])


def _remove(directory: Path) -> bool:
    shutil.rmtree(directory, ignore_errors=True)
    return not directory.exists()
