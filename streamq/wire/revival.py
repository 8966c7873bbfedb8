"""Bringing back a server whose connection was refused, where this process can.

A server this process may start again registers a *reviver* for its address: the shared
embedded server (:mod:`streamq.server.shared`), whose keeper may have died with it. When a
connection to that address is refused, the connection (:mod:`.routing`,
:mod:`.routing_sync`) calls the reviver and, if the server runs again, connects once more:
running producers and consumers go on by themselves instead of retrying a dead port for
ever. Any other address (a server streamq does not own) has no reviver and costs nothing.

A reviver blocks (a file lock, maybe starting a process and waiting for it to load its
data): asyncio connections call it in a worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio.to_thread

Reviver = Callable[[], bool]  # True if the server runs (again): connecting is worth a retry

_revivers: dict[tuple[str, int], Reviver] = {}
_lock = threading.Lock()


def register(host: str, port: int, reviver: Reviver) -> None:
    """Call ``reviver`` when a connection to ``host:port`` is refused."""
    with _lock:
        _revivers[(host, port)] = reviver


def unregister(host: str, port: int) -> None:
    with _lock:
        _revivers.pop((host, port), None)


def clear() -> None:
    """Forget every reviver (in a forked child: they belong to the parent's leases)."""
    with _lock:
        _revivers.clear()


def address_of(connection: object) -> tuple[str, int]:
    """``(host, port)`` of a connection; a unix socket's has none, and so no reviver."""
    return str(getattr(connection, "host", "")), int(getattr(connection, "port", 0) or 0)


def revive(host: str, port: int) -> bool:
    """The reviver's verdict for ``host:port`` (False when it has none)."""
    reviver = _revivers.get((host, port))
    return reviver is not None and reviver()


async def revive_async(host: str, port: int) -> bool:
    """:func:`revive` from an event loop: the reviver runs in a worker thread."""
    reviver = _revivers.get((host, port))
    if reviver is None:
        return False
    return await anyio.to_thread.run_sync(reviver)
