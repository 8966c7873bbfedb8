"""How a worker tells the supervisor how it is: a JSON status file it rewrites every
``interval`` seconds in the run directory (private to one ``streamq run``).

A status holds the worker's slot and pid, when it was written, whether it is ready, and
per queue its health (:meth:`MessageQueue.health`), its counters (:meth:`stats`) and its
URL (for the queue gauges the supervisor reads from Redis; the directory is private).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATUS_INTERVAL = 1.0

# How a worker exits: stopped gracefully, a queue stopped on an error, the target cannot run.
EXIT_OK, EXIT_ERROR, EXIT_CONFIG = 0, 1, 2


def status_path(run_dir: Path, slot: int) -> Path:
    return run_dir / f"worker-{slot}.json"


def write_status(path: Path, report: dict[str, Any]) -> None:
    """Replace the status atomically (a reader never sees half of one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({**report, "time": time.time()}, default=str))
    os.replace(tmp, path)


def error_path(run_dir: Path, slot: int) -> Path:
    """Where a worker that cannot run leaves why, for the supervisor to say once."""
    return run_dir / f"worker-{slot}.error"


def read_error(run_dir: Path, slot: int) -> str | None:
    try:
        return error_path(run_dir, slot).read_text().strip() or None
    except OSError:
        return None


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def is_fresh(status: dict[str, Any], interval: float) -> bool:
    """Written recently enough to be believed (a few intervals, plus slack)."""
    return time.time() - float(status.get("time", 0)) < 3 * interval + 2.0
