"""Slowing down guesses of the write token, per client address.

An address that gave a wrong token (at login, or as ``Authorization: Bearer``)
:data:`MAX_FAILURES` times within :data:`WINDOW` seconds is refused with 429 and
``Retry-After`` until the oldest of those failures is :data:`WINDOW` seconds old; the right
token is refused too meanwhile, so a guess that happens to be right tells nothing. A
successful login forgets the address's failures.

A generated token (24 random bytes) cannot be guessed anyway; the limit makes a weak token
chosen by hand costly to guess as well. The address is the TCP peer's (uvicorn runs without
proxy headers): behind a reverse proxy all clients share the proxy's, so one guesser makes
everyone wait for a minute, which errs on the safe side.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_FAILURES = 5
WINDOW = 60.0
MAX_ADDRESSES = 10_000  # addresses remembered; the least recently failed is forgotten first


class LoginThrottle:
    """The recent wrong-token attempts of each client address."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window: float = WINDOW,
        *,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures, self.window = max_failures, window
        self._max_addresses, self._clock = max_addresses, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until ``address`` may try a token again; None if it may now."""
        failures = self._recent(address)
        if len(failures) < self.max_failures:
            return None
        return max(math.ceil(failures[0] + self.window - self._clock()), 1)

    def failed(self, address: str) -> None:
        """Count a wrong token from ``address``."""
        failures = self._recent(address)
        failures.append(self._clock())
        self._failures[address] = failures
        self._failures.move_to_end(address)
        while len(self._failures) > self._max_addresses:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def _recent(self, address: str) -> deque[float]:
        """``address``'s failures within the window (older ones dropped)."""
        failures = self._failures.get(address, deque())
        oldest_counted = self._clock() - self.window
        while failures and failures[0] <= oldest_counted:
            failures.popleft()
        if not failures:
            self._failures.pop(address, None)
        return failures
