"""Calling a batch handler: which entries of a batch failed, after the in-process retries
of those that failed and the bisection of a batch that keeps failing as a whole (so one
poison entry does not take its batch-mates with it). What each failure then means (dead
letter, retry later, left pending) is the :class:`~streamq.consume.dispatch.Dispatcher`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .._log_summary import LogSummary, shortened
from ..config import RetryPolicy
from ..message import Message
from ..signals import HandlerSignal, PartialFailure
from .failures import describe
from .retrying import retrying
from .routes import Route

# the records keep the dispatcher's logger name: filters set on it go on working
log = logging.getLogger("streamq.consume.dispatch")

CallOnce = Callable[[Callable[[Any], Any], bool, Any], Awaitable[Any]]


class _BatchFailed(Exception):
    """Internal: some entries of a batch attempt failed (retry those)."""


def _signalled(errors: dict[str, BaseException]) -> bool:
    """The handler steered delivery (Retry, Reject, Throttle): no in-process retry."""
    return any(isinstance(e, HandlerSignal) for e in errors.values())


class BatchCalls:
    """Calls of one consumer's batch handlers (``call_once``: one call, with the handler
    timeout), retried under ``retry`` and bisected if ``bisect``."""

    def __init__(
        self, *, call_once: CallOnce, retry: RetryPolicy, bisect: bool, summary: LogSummary
    ) -> None:
        self._call_once, self._retry_policy, self._bisect = call_once, retry, bisect
        self._summary = summary
        # the first call is made outside tenacity (the usual, lean path), these are the rest
        self._retrying = retrying(retry, retry.attempts - 1, retry_on=_BatchFailed)

    async def run(self, route: Route, messages: list[Message[Any]]) -> dict[str, BaseException]:
        """Call the batch handler, retrying only what failed; return ID -> last error.

        A batch that fails as a whole again after a redelivery is bisected (see
        :meth:`_isolate`), so one poison entry does not take its batch-mates with it.
        """
        errors, whole = await self._attempt(route, messages)  # the usual, lean path
        remaining = messages
        if errors and not _signalled(errors) and self._retry_policy.attempts > 1:
            remaining = [m for m in messages if m.id in errors]
            errors, whole, remaining = await self._retry(route, remaining)
        if whole and len(remaining) > 1 and self._keeps_failing(remaining):
            return await self._isolate(route, remaining)
        return errors

    async def _retry(
        self, route: Route, remaining: list[Message[Any]]
    ) -> tuple[dict[str, BaseException], bool, list[Message[Any]]]:
        """In-process retries of the entries that failed (tenacity, the single path's
        policy); returns the last attempt's errors, whether it failed whole, and its entries."""
        errors: dict[str, BaseException] = {}
        whole = False
        try:
            async for attempt in self._retrying.copy():
                with attempt:
                    errors, whole = await self._attempt(route, remaining)
                    if errors and not _signalled(errors):
                        remaining = [m for m in remaining if m.id in errors]
                        raise _BatchFailed
        except _BatchFailed:
            pass
        return errors, whole, remaining

    def _keeps_failing(self, messages: list[Message[Any]]) -> bool:
        """Bisect a batch that failed as a whole on a redelivery (or on its only allowed
        delivery): a first failure may be passing (a database restarting) and is retried
        as a whole; one that comes back is likely a poison entry."""
        return self._bisect and (
            self._retry_policy.max_deliveries == 1 or any(m.delivery_count > 1 for m in messages)
        )

    async def _isolate(
        self, route: Route, messages: list[Message[Any]]
    ) -> dict[str, BaseException]:
        """Bisect a batch that keeps failing as a whole: each half is tried once on its
        own, and a half that fails as a whole is split again, until the failing entries
        are alone. Order is kept (first half first). Costs at most 2n - 2 calls, when every
        piece fails (e.g. a database that is down): ``BatchConfig(bisect=False)`` turns it off.
        """
        mid = len(messages) // 2
        failed: dict[str, BaseException] = {}
        for half in (messages[:mid], messages[mid:]):
            errors, whole = await self._attempt(route, half)
            if errors and whole and len(half) > 1:
                errors = await self._isolate(route, half)
            failed.update(errors)
        return failed

    async def _attempt(
        self, route: Route, messages: list[Message[Any]]
    ) -> tuple[dict[str, BaseException], bool]:
        """One call of the batch handler: (ID -> error of the entries that failed, whether
        the batch failed as a whole with an ordinary error)."""
        assert route.batch is not None
        for message in messages:  # outputs staged by an earlier attempt go with it
            if message._outputs is not None:
                message._outputs = None
        try:
            result = await self._call_once(route.batch, route.batch_is_async, messages)
        except PartialFailure as partial:
            result = partial
        except HandlerSignal as signal:  # Retry, Reject, Throttle: steering, not a failure
            return {m.id: signal for m in messages}, False
        except Exception as e:
            self._summary.log(
                log, f"failed calls of the batch handler of {route.type_name!r}",
                logging.WARNING, "batch handler for %r failed for %d entries: %s",
                route.type_name, len(messages), shortened(describe(e)),
            )  # fmt: skip
            return {m.id: e for m in messages}, True
        if isinstance(result, PartialFailure):
            ids = {m.id for m in messages}
            return {i: error for i, error in result.failed.items() if i in ids}, False
        return {}, False
