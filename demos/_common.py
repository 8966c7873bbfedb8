"""Shared demo plumbing: a fresh stream name, a banner, and :func:`run`, which removes
every stream a demo made (with streamq's keys for it) when the demo ends, however it
ends: the shared server is persistent, and a demo must not leave topics on it."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

import anyio

log = logging.getLogger("demos")
CREATED: list[str] = []  # the streams and keys this demo made, removed by run() at its end


def setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("STREAMQ_LOG", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def fresh_stream(name: str) -> str:
    """A stream name no one uses, removed with streamq's keys for it by :func:`run`."""
    stream = f"demo-{name}-{uuid.uuid4().hex[:6]}"
    CREATED.append(stream)
    return stream


def created(*names: str) -> None:
    """Streams or keys of the demo's own (not from :func:`fresh_stream`) to remove too."""
    CREATED.extend(names)


def where() -> str:
    url = os.environ.get("STREAMQ_REDIS_URL")
    return url if url else "the embedded Valkey server"


def run(main: Callable[..., Any], *args: Any) -> None:
    """Run the demo ``main`` (async or not); at its end, also after an error, Ctrl-C or
    SIGTERM, remove what it made. Exits 130 when interrupted."""
    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: the clean-up still runs
    code: Any = 0
    try:
        code = anyio.run(main, *args) if inspect.iscoroutinefunction(main) else main(*args)
    except KeyboardInterrupt:
        print("interrupted: removing the demo's topics", file=sys.stderr)
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: let it finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        remove_created()
    sys.exit(code)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def remove_created() -> None:
    """Delete every stream and key in CREATED, and streamq's keys of each stream
    (``streamq:{<stream>}:*``), from the server the demo used (best effort)."""
    from streamq.config import env_url
    from streamq.server.shared import running_shared_url

    if not CREATED:
        return
    try:
        url = env_url() or running_shared_url()  # no server running: nothing to remove
        if url is not None:
            _delete(url, CREATED)
    except Exception as e:  # the server may be gone: say so, do not fail
        log.warning("could not remove the demo's topics %s: %s", CREATED, e)
    CREATED.clear()


def _delete(url: str, names: list[str]) -> None:
    from streamq.wire.client import connect_sync
    from streamq.wire.keys import Keys

    for name in names:
        with connect_sync(url).client_for(name, owner=True) as client:
            pattern = "".join("\\" + c if c in "*?[]\\" else c for c in Keys(name).prefix)
            client.delete(name, *client.scan_iter(match=pattern + "*", count=1000))
