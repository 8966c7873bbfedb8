"""Shared demo plumbing: a fresh stream name, a banner, and :func:`run`, which removes
every stream a demo made (with streamq's keys for it) when the demo ends, however it
ends: the shared server is persistent, and a demo must not leave topics on it."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

import anyio

log = logging.getLogger("demos")
CREATED: list[str] = []  # the streams and keys this demo made, removed by run() at its end
CHILDREN: list[subprocess.Popen[Any]] = []  # processes the demo started, ended by run() first
_starting = False  # a child is being started: an interrupt waits until it is recorded
_interrupted = False  # an interrupt came while a child was being started


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


def spawn(command: list[str], **options: Any) -> subprocess.Popen[Any]:
    """Start a child process that :func:`run` ends before it removes the demo's keys, so
    none writes them again afterwards. A Ctrl-C or SIGTERM that comes while the child is
    being started is held until the child is recorded: raised inside ``Popen`` it would
    lose the handle, and the child would outlive the clean-up unseen."""
    global _starting, _interrupted
    _starting = True
    try:
        child = subprocess.Popen(command, **options)
        CHILDREN.append(child)
    finally:
        _starting = False
    if _interrupted:
        _interrupted = False
        raise KeyboardInterrupt
    return child


def end_children(timeout: float = 30.0) -> None:
    """End every child :func:`spawn` started: SIGTERM, then SIGKILL after ``timeout``."""
    for child in CHILDREN:
        if child.poll() is None:
            child.terminate()
    for child in CHILDREN:
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    CHILDREN.clear()


def run(main: Callable[..., Any], *args: Any) -> None:
    """Run the demo ``main`` (async or not); at its end, also after an error, Ctrl-C or
    SIGTERM, end the processes it started and then remove what it made. Exits 130 when
    interrupted."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: the clean-up still runs
    code: Any = 0
    try:
        if inspect.iscoroutinefunction(main):
            code = anyio.run(_cancelled_on_signal, main, args)
        else:
            code = main(*args)
    except KeyboardInterrupt:
        print("interrupted: removing the demo's topics", file=sys.stderr)
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: let it finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_children()  # no child of the demo writes its keys after they are removed
        remove_created()
    sys.exit(code)


async def _cancelled_on_signal(main: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Run the async ``main``, cancelled when SIGINT or SIGTERM comes. The event loop hears
    the signal (no ``KeyboardInterrupt`` raised wherever the loop happened to be: one that
    lands in the loop's own code can be lost, or leave tasks no one cancels); ``main``
    ends as any cancelled code does, its ``finally`` clauses and ``async with`` exits
    run. Raises ``KeyboardInterrupt`` after it, as Ctrl-C would."""
    interrupted = False
    result: Any = None
    async with anyio.create_task_group() as tg:

        async def listen(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for _ in signals:
                    interrupted = True
                    tg.cancel_scope.cancel()
                    return

        await tg.start(listen)  # listening before main starts: no signal falls between
        result = await main(*args)
        tg.cancel_scope.cancel()
    # the loop no longer listens (SIGTERM is back to its default): a second signal waits
    # for the clean-up, as run() has it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    if _starting:
        _interrupted = True  # raised by spawn() once the child is recorded
        return
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
