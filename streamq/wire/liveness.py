"""Whether a subscription's connection still answers.

A subscription only waits for messages, so no read on it ever times out: a connection that
went half-open (a peer or a network that stopped answering without closing it) would keep
it subscribed to nothing for good. :class:`Liveness` sends a ``PING`` on it every socket
timeout and expects the ``PONG`` (a ``pong`` message) before the next one. The caller
waits for messages at most :meth:`Liveness.wait` seconds at a time, calls
:meth:`Liveness.answered` on a ``pong`` and :meth:`Liveness.check` after each wait (the
control channel's listener and the scheduler's wake-up listener).
"""

from __future__ import annotations

import anyio
import redis.asyncio as aioredis

from ..errors import ServerUnavailableError
from .timeouts import SOCKET_TIMEOUT


class Liveness:
    """A PING on the subscription every ``interval``, its PONG expected before the next."""

    @classmethod
    def of(cls, pubsub: aioredis.client.PubSub) -> Liveness:
        """Every socket timeout of the subscription's connection (the URL's
        ``socket_timeout``, else streamq's)."""
        connection = pubsub.connection
        timeout = getattr(connection, "socket_timeout", None) if connection is not None else None
        return cls(float(timeout) if timeout else SOCKET_TIMEOUT)

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.due = anyio.current_time() + interval
        self._awaiting = False

    def wait(self) -> float:
        """Seconds until the next check is due."""
        return max(self.due - anyio.current_time(), 0.0)

    def answered(self) -> None:
        self._awaiting = False

    async def check(self, pubsub: aioredis.client.PubSub) -> None:
        """PING when due; raise if the last one is still unanswered."""
        if anyio.current_time() < self.due:
            return
        if self._awaiting:
            raise ServerUnavailableError(
                f"the subscription answered no PING within {self.interval:g}s"
            )
        await pubsub.ping()
        self._awaiting, self.due = True, anyio.current_time() + self.interval
