"""The retry delay of the loops that must outlive a server going away (readers, listeners)."""

from __future__ import annotations


class Backoff:
    """A delay that doubles after each failure, up to ``most``, and starts over at ``first``
    after a success: ``await anyio.sleep(backoff.next())`` on failure, ``reset()`` on success.
    """

    __slots__ = ("delay", "first", "most")

    def __init__(self, first: float, most: float) -> None:
        self.first = first
        self.most = most
        self.delay = first

    def next(self) -> float:
        """The delay to wait now; the next one is twice as long (at most ``most``)."""
        delay = self.delay
        self.delay = min(delay * 2, self.most)
        return delay

    def reset(self) -> None:
        self.delay = self.first
