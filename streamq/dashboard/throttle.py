"""Slowing down guesses of the write token, per client address and for the token itself.

An address that gave a wrong token (at login, or as ``Authorization: Bearer``)
:data:`MAX_FAILURES` times within :data:`WINDOW` seconds is refused with 429 and
``Retry-After`` until the oldest of those failures is :data:`WINDOW` seconds old; the right
token is refused too meanwhile, so a guess that happens to be right tells nothing. A
successful login forgets the address's failures.

Addresses are cheap to change (every ``127.x.y.z`` is loopback, a guesser may own many), so
wrong tokens are also counted whatever their address: after :data:`MAX_TOTAL_FAILURES`
within the window, every address is refused until the oldest of them is a window old. A
guesser then gets at most that many guesses a minute, and while one guesses, logging in
and Bearer requests wait for everyone (sessions already open go on).

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
MAX_TOTAL_FAILURES = 20  # from every address together, within WINDOW
WINDOW = 60.0
MAX_ADDRESSES = 10_000  # addresses remembered; the least recently failed is forgotten first


class LoginThrottle:
    """The recent wrong-token attempts of each client address, and of all of them."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window: float = WINDOW,
        *,
        max_total_failures: int = MAX_TOTAL_FAILURES,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures, self.window = max_failures, window
        self.max_total_failures = max_total_failures
        self._max_addresses, self._clock = max_addresses, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._every_failure: deque[float] = deque(maxlen=max_total_failures)

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until ``address`` may try a token again; None if it may now."""
        waits = [
            self._wait(self._recent(address), self.max_failures),
            self._wait(self._recent_total(), self.max_total_failures),
        ]
        return max((w for w in waits if w is not None), default=None)

    def _wait(self, failures: deque[float], limit: int) -> int | None:
        if len(failures) < limit:
            return None
        return max(math.ceil(failures[0] + self.window - self._clock()), 1)

    def failed(self, address: str) -> None:
        """Count a wrong token from ``address``."""
        self._every_failure.append(self._clock())
        failures = self._recent(address)
        failures.append(self._clock())
        self._failures[address] = failures
        self._failures.move_to_end(address)
        while len(self._failures) > self._max_addresses:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def _recent_total(self) -> deque[float]:
        """The failures of every address within the window (the last of them only)."""
        oldest_counted = self._clock() - self.window
        while self._every_failure and self._every_failure[0] <= oldest_counted:
            self._every_failure.popleft()
        return self._every_failure

    def _recent(self, address: str) -> deque[float]:
        """``address``'s failures within the window (older ones dropped)."""
        failures = self._failures.get(address, deque())
        oldest_counted = self._clock() - self.window
        while failures and failures[0] <= oldest_counted:
            failures.popleft()
        if not failures:
            self._failures.pop(address, None)
        return failures
