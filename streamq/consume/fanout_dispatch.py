"""Outcomes of a fan-out delivery (a queue with ``group=None``).

A fan-out subscriber reads with ``XREAD``: nothing is pending, nothing is acked, claimed
or dead-lettered. The handler calls, the in-process retries (``RetryPolicy.attempts`` and
backoff), batch retries and the Message building are the group consumer's
(:class:`~streamq.consume.dispatch.Dispatcher`); only the outcomes differ: an entry whose
handler still fails after its retries (or whose payload does not validate, or that the
handler rejects) is logged once at WARNING and counted in ``failed``, and the subscriber
goes on with the next entries. ``Retry(delay)`` cannot redeliver here: it counts as a
failure.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import anyio
import redis.asyncio as aioredis

from .._log_summary import LogSummary
from ..config import RetryPolicy
from ..errors import MessageFormatError
from ..message import RawEntry
from ..signals import HandlerSignal
from ..topic.deadletter import DeadLetters
from .acks import Acker
from .context import Place
from .dispatch import Dispatcher
from .failures import describe
from .routes import Route, Routes
from .stats import Stats
from .unrouted import UnroutedDeliveries

log = logging.getLogger(__name__)

# What a fan-out Message says of its group (it has none).
NO_GROUP = ""

# The failures of the batch being handled in this task (None: not in a batch): a batch's
# failed entries are logged together, in one WARNING.
_batch_failures: ContextVar[list[tuple[str, str, BaseException | None]] | None] = ContextVar(
    "streamq_fanout_batch_failures", default=None
)


class _NoAcks(Acker):
    """Nothing to acknowledge without a group: ``ack`` does nothing."""

    def ack(self, entry_id: str) -> None:
        return None

    def ack_many(self, entry_ids: list[str]) -> None:
        return None


class FanoutDispatcher(Dispatcher):
    """The group :class:`Dispatcher` with fan-out outcomes (log and count, go on)."""

    async def dead_letter(
        self,
        entry: RawEntry,
        reason: str,
        error: BaseException | None = None,
        *,
        bad_input: bool = False,
    ) -> None:
        # every outcome that would dead-letter in a group lands here: logged and counted
        self.stats.failed += 1
        in_batch = _batch_failures.get()
        if in_batch is not None:
            in_batch.append((self._named(entry), reason, error))
            return
        log.warning(
            "fan-out handler failed for %s on %s (not redelivered: no consumer group): %s",
            self._named(entry), self.stream, reason, exc_info=error,
        )  # fmt: skip

    def _named(self, entry: RawEntry) -> str:
        """The entry's ID as its Message has it (naming its partition, if any)."""
        return entry.id if self._id_prefix is None else self._id_prefix + entry.id

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool = False) -> None:
        if isinstance(error, HandlerSignal):  # Reject, Retry: not retried in process
            reason = f"the handler raised {describe(error)} (no redelivery without a group)"
        else:
            reason = f"failed after {self.retry.attempts} attempt(s): {describe(error)}"
        await self.dead_letter(entry, reason, error)

    async def _settle(self, entry: RawEntry, error: BaseException) -> None:
        # Reject and Retry(delay) both end here: there is no redelivery to ask for
        await self.failed(entry, error)

    async def _handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        failures: list[tuple[str, str, BaseException | None]] = []
        token = _batch_failures.set(failures)
        try:
            await super()._handle_batch(route, entries)
        finally:
            _batch_failures.reset(token)
        if failures:
            first_id, reason, error = failures[0]
            log.warning(
                "fan-out batch handler for %r failed for %d entries on %s (not redelivered: "
                "no consumer group): %s; first: %s",
                route.type_name, len(failures), self.stream, reason, first_id, exc_info=error,
            )  # fmt: skip

    async def settled(self, entries: list[RawEntry]) -> None:
        return None  # no unrouted-delivery records: nothing was redelivered

    async def no_route(self, entry: RawEntry) -> None:
        self.skip(entry)  # (the subscriber skips them before the workers)

    def skip(self, entry: RawEntry) -> None:
        """``entry`` has no handler here. A type this subscriber does not handle is skipped:
        counted in ``skipped`` and logged at WARNING once per type (then summarised), for
        there is no group whose other consumers could take it. An entry without a valid
        type is bad input: logged and counted in ``failed``, as a failing handler."""
        try:
            type_name = entry.check_type()
        except MessageFormatError as e:
            self.stats.failed += 1
            self.summary.log(
                log, "malformed entries", logging.WARNING,
                "fan-out subscriber skipped malformed entry %s on %s: %s",
                self._named(entry), self.stream, e,
            )  # fmt: skip
            return
        self.stats.skipped += 1
        self.summary.log(
            log, f"entries of type {type_name!r} skipped (no handler here)", logging.WARNING,
            "no handler for type %r in this fan-out subscriber: skipped %s on %s (counted in "
            "skipped)", type_name, self._named(entry), self.stream,
        )  # fmt: skip


def fanout_dispatcher(
    client: aioredis.Redis,
    stream: str,
    consumer: str,
    *,
    router: Routes,
    retry: RetryPolicy,
    handler_timeout: float | None,
    thread_limiter: anyio.CapacityLimiter,
    stats: Stats,
    place: Place,
    summary: LogSummary,
) -> FanoutDispatcher:
    """The dispatcher of one stream (a partition's) of a fan-out subscriber."""
    return FanoutDispatcher(
        router=router,
        stream=stream,
        group=NO_GROUP,
        consumer=consumer,
        retry=retry,
        acker=_NoAcks(client, stream, NO_GROUP),
        dead_letters=DeadLetters(client, stream),  # never written: dead_letter is overridden
        unrouted=UnroutedDeliveries(client, stream, NO_GROUP),  # never used: settled is
        schedule_retry=lambda entry, delay: None,
        handler_timeout=handler_timeout,
        thread_limiter=thread_limiter,
        stats=stats,
        bisect_batches=False,  # no redelivery: a batch is retried whole, never bisected
        place=place,
        summary=summary,
    )
