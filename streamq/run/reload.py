"""``--reload``: watch the code with watchfiles (extra ``[reload]``; Rust's notify behind
it, not a hand-written poll) and call back on every change of a Python file."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from ..errors import ConfigError

log = logging.getLogger(__name__)


def check_available() -> None:
    """Raise ConfigError, saying how to install it, when watchfiles is missing."""
    try:
        import watchfiles  # noqa: F401
    except ImportError as e:
        raise ConfigError("--reload needs the [reload] extra: pip install streamq[reload]") from e


def absolute(directories: Sequence[str | Path]) -> list[str]:
    return [os.path.abspath(d) for d in directories]


async def watch_code(
    roots: Sequence[str], on_change: Callable[[list[str]], None], stop: anyio.Event
) -> None:
    """Call ``on_change(paths)`` for each batch of changed ``*.py`` files under ``roots``
    (absolute directories) until ``stop``."""
    from watchfiles import PythonFilter, awatch

    log.info("watching %s for changes", ", ".join(roots))
    async for changes in awatch(*roots, watch_filter=PythonFilter(), stop_event=stop):
        paths = sorted({path for _, path in changes})
        on_change(paths)
