"""The one retry engine (tenacity), for single handlers and batches alike.

tenacity is loaded at the first retry (a handler's first failure): a consumer whose handlers
succeed never loads it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ..config import RetryPolicy
from ..signals import HandlerSignal

if TYPE_CHECKING:
    from tenacity import AsyncRetrying


@dataclass(frozen=True, slots=True)
class Retrying:
    """How a handler is retried in process; :meth:`copy` makes the engine for one run."""

    policy: RetryPolicy
    attempts: int
    retry_on: type[Exception] | None = None
    made: int = 0  # attempts made before the engine's first (a single's first call)

    def first_wait(self) -> float:
        """The wait before the engine's first attempt: the backoff after the ``made``
        attempts (none without them)."""
        if not self.made:
            return 0.0
        policy = self.policy
        wait: float = min(policy.backoff * 2.0 ** (self.made - 1), policy.max_backoff)
        return wait + random.uniform(0, policy.jitter)

    def copy(self) -> AsyncRetrying:
        """A fresh tenacity engine: ``attempts`` tries with exponential backoff from
        ``policy.backoff`` (counted on from the ``made`` attempts), capped, plus jitter;
        signals end it."""
        import tenacity  # loaded at the first retry only (see the module's docstring)

        policy = self.policy
        return tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max(self.attempts, 1)),
            # exponential from `backoff`, capped, plus random jitter (tenacity 8 and 9)
            wait=tenacity.wait_exponential(
                multiplier=policy.backoff * 2**self.made, max=policy.max_backoff
            )
            + tenacity.wait_random(0, policy.jitter),
            retry=(
                tenacity.retry_if_not_exception_type(HandlerSignal)
                if self.retry_on is None
                else tenacity.retry_if_exception_type(self.retry_on)
            ),
            reraise=True,
        )


def retrying(
    policy: RetryPolicy, attempts: int, *, retry_on: type[Exception] | None = None, made: int = 0
) -> Retrying:
    """The one retry engine for singles and batches (see :class:`Retrying`)."""
    return Retrying(policy, attempts, retry_on, made)


async def last_failure(
    retrying: Retrying, call: Callable[[], Awaitable[object]]
) -> Exception | None:
    """Call ``call`` under a fresh engine of ``retrying``: None once a call succeeds, else the
    last call's exception with the traceback it was raised with (tenacity re-raises it
    through its own frames, which would be logged with it)."""
    failure: Exception | None = None
    traceback = None
    await anyio.sleep(retrying.first_wait())
    try:
        async for attempt in retrying.copy():
            with attempt:
                try:
                    await call()
                except Exception as e:
                    failure, traceback = e, e.__traceback__
                    raise
    except Exception as e:
        if e is not failure:
            raise
        return e.with_traceback(traceback)
    return None
