"""How long a reply may take before its connection counts as lost (a server that stopped
answering), for every client streamq makes: plain, cluster and Sentinel ones."""

from __future__ import annotations

# Set, not left to redis-py: 5 s since redis-py 8, none before. A command that waits on the
# server by design (a blocking read, WAIT) is given its own wait on top: blocking_timeout().
SOCKET_TIMEOUT = 5.0


def blocking_timeout(wait: float) -> float:
    """The read timeout of a command the server holds up to ``wait`` seconds by design
    (``XREADGROUP ... BLOCK``, ``WAIT``): that wait, then the usual :data:`SOCKET_TIMEOUT`."""
    return wait + SOCKET_TIMEOUT


# How long a caller waits for a free connection of a client's pool before it fails.
POOL_WAIT = 30.0
