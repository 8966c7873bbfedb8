"""Reading one reply by hand, so that a reply that comes late never answers another command.

Replies on a connection come in the order of the commands sent on it. When a reply takes
longer than its timeout (the server was frozen: a SIGSTOP, a paused VM, a long fork; or
this process was), the reply still comes, later. A connection kept after such a timeout
hands that late reply to the next command sent on it: a read loop would take an XACK's
count for its XREADGROUP's entries, a publish another entry's ID. So a read that times out
closes its connection, always, and raises redis-py's ``TimeoutError`` (translated by the
callers to ``ServerUnavailableError``: the loops back off and retry on a new connection, as
after any dropped connection).

Never ``read_response(timeout=...)``: on a timeout redis-py returns None from it (a nil
reply looks the same) and keeps the connection, its reply still to come. The timeout is
set as the connection's ``socket_timeout`` for the read instead; redis-py then closes the
connection itself and raises (closed here again, in case a version does not).

How long a reply may take: the connection's ``socket_timeout`` (the URL's
``socket_timeout=`` option, else streamq's :data:`~.timeouts.SOCKET_TIMEOUT`), plus what
the server holds it for by design (``held``: a blocking read's ``BLOCK``, ``WAIT``'s
timeout). A connection without a socket timeout waits for ever.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import redis


def reply_timeout(socket_timeout: float | None, held: float = 0.0) -> float | None:
    """How long a reply may take: ``held`` (the server holds it that long by design),
    then ``socket_timeout``; None (no limit) when the connection has no socket timeout."""
    return None if socket_timeout is None else held + socket_timeout


async def read_reply(connection: Any, held: float = 0.0) -> Any:
    """The next reply on ``connection`` (redis.asyncio), an error reply raised as
    ``read_response`` raises it. A reply later than :func:`reply_timeout` closes the
    connection and raises ``redis.TimeoutError``."""
    usual = connection.socket_timeout
    connection.socket_timeout = reply_timeout(usual, held)
    try:
        return await connection.read_response()
    except redis.TimeoutError:
        with anyio.CancelScope(shield=True):
            await connection.disconnect()  # its late reply must answer nothing
        raise
    finally:
        connection.socket_timeout = usual


def read_reply_sync(connection: Any, held: float = 0.0) -> Any:
    """The blocking twin of :func:`read_reply` (redis-py's blocking connection)."""
    with _socket_timeout(connection, reply_timeout(connection.socket_timeout, held)):
        try:
            return connection.read_response()
        except redis.TimeoutError:
            connection.disconnect()  # its late reply must answer nothing
            raise


@contextmanager
def _socket_timeout(connection: Any, timeout: float | None) -> Iterator[None]:
    """The socket's timeout for one read: a blocking connection reads with the timeout of
    its socket, set when it connected (redis-py 5's blocking ``read_response`` takes no
    timeout argument)."""
    sock = connection._sock
    if sock is None or timeout == connection.socket_timeout:
        yield
        return
    sock.settimeout(timeout)
    try:
        yield
    finally:
        if connection._sock is sock:  # else the connection was closed (and its socket)
            sock.settimeout(connection.socket_timeout)
