"""The one retry engine (tenacity), for single handlers and batches alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from ..config import RetryPolicy
from ..signals import HandlerSignal


def retrying(
    policy: RetryPolicy, attempts: int, *, retry_on: type[Exception] | None = None
) -> AsyncRetrying:
    """The one retry engine (tenacity) for singles and batches: ``attempts`` tries with
    exponential backoff from ``policy.backoff``, capped, plus jitter; signals end it."""
    return AsyncRetrying(
        stop=stop_after_attempt(max(attempts, 1)),
        # exponential from `backoff`, capped, plus random jitter (works on tenacity 8 and 9)
        wait=wait_exponential(multiplier=policy.backoff, max=policy.max_backoff)
        + wait_random(0, policy.jitter),
        retry=(
            retry_if_not_exception_type(HandlerSignal)
            if retry_on is None
            else retry_if_exception_type(retry_on)
        ),
        reraise=True,
    )


async def last_failure(
    retrying: AsyncRetrying, call: Callable[[], Awaitable[object]]
) -> Exception | None:
    """Call ``call`` under a copy of ``retrying``: None once a call succeeds, else the last
    call's exception with the traceback it was raised with (tenacity re-raises it through
    its own frames, which would be logged with it)."""
    failure: Exception | None = None
    traceback = None
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
