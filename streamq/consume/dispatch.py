"""Running handlers and deciding each entry's outcome.

Outcomes: success -> ack; ``Reject``, bad input or too many deliveries -> dead letter (then
ack); ``Retry(delay)`` -> re-claimed after the delay; any other failure after the in-process
retries -> left pending, to be redelivered by claiming, until ``max_deliveries``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from time import perf_counter
from typing import Any

import anyio
import anyio.to_thread

from .._log_summary import LogSummary, shortened
from ..config import RetryPolicy
from ..errors import MessageFormatError
from ..message import Message, RawEntry, decode_key
from ..payload.reading import read_payload, waits_for_newer_consumer
from ..signals import HandlerSignal, Reject, Retry
from ..topic.deadletter import DeadLetters
from .acks import Acker
from .batch_calls import BatchCalls
from .context import Place
from .failures import describe, reraise_unless_failure
from .observe import Observer
from .retrying import last_failure, retrying
from .routes import Route, Routes
from .stats import Stats
from .unrouted import UnroutedDeliveries

log = logging.getLogger(__name__)

ScheduleRetry = Callable[[RawEntry, float], None]


class Dispatcher:
    """Decodes entries, calls handlers with retries and applies the outcome."""

    def __init__(
        self,
        *,
        router: Routes,
        stream: str,
        group: str,
        consumer: str,
        retry: RetryPolicy,
        acker: Acker,
        dead_letters: DeadLetters,
        unrouted: UnroutedDeliveries,
        schedule_retry: ScheduleRetry,
        handler_timeout: float | None,
        thread_limiter: anyio.CapacityLimiter,
        stats: Stats,
        bisect_batches: bool = True,
        place: Place | None = None,
        summary: LogSummary | None = None,
    ) -> None:
        self.router = router
        self.stream, self.group, self.consumer = stream, group, consumer
        # what a Message says of where it comes from: the topic, and the partition if any
        place = place or Place(stream)
        self._topic, self._partition = place.topic, place.partition or 0
        self._id_prefix = None if place.partition is None else f"{place.partition}:"
        self.retry = retry
        self.acker = acker
        self.dead_letters = dead_letters
        self.unrouted = unrouted
        self.schedule_retry = schedule_retry
        self.handler_timeout = handler_timeout
        self.thread_limiter = thread_limiter
        self.stats = stats
        self.bisect_batches = bisect_batches
        # the records each failing or foreign entry makes, summarised (streamq._log_summary)
        self.summary = summary or LogSummary()
        self.observer = Observer()  # log context; trace spans are a middleware (.traced)
        # singles: the first call is made outside tenacity (the hot path), these are the rest
        self._retrying = retrying(retry, retry.attempts - 1)
        # batches: which entries failed, after retries and bisection
        self._batch_calls = BatchCalls(
            call_once=self._call_once, retry=retry, bisect=bisect_batches, summary=self.summary
        )

    # -- decoding -------------------------------------------------------------------
    def message(self, route: Route, entry: RawEntry) -> Message[Any]:
        """Build the typed Message; raises whatever decoding or validation raised."""
        prefix = self._id_prefix
        raw_key = entry.fields.get(b"key")
        data, meta = read_payload(route, entry)  # enc/kid decoded, ver upcast, validated
        return Message(
            entry.id if prefix is None else prefix + entry.id,
            route.type_name,
            data,
            meta,
            entry.delivery_count,
            self._topic,
            self.group,
            self._partition,
            None if raw_key is None else decode_key(raw_key),
        )

    async def bad_payload(self, route: Route, entry: RawEntry, error: Exception) -> None:
        """Any error raised while decoding or validating (a validator's KeyError too) is
        that entry's failure: dead-lettered with the reason."""
        if waits_for_newer_consumer(error, entry, self.retry):  # a newer schema version
            await self.no_route(entry)
            return
        reason = f"invalid payload for {route.type_name!r}: {describe(error, limit=None)}"
        await self.dead_letter(entry, reason, error, bad_input=True)

    # -- outcomes -------------------------------------------------------------------
    async def dead_letter(
        self,
        entry: RawEntry,
        reason: str,
        error: BaseException | None = None,
        *,
        bad_input: bool = False,
    ) -> None:
        self.stats.dead_lettered += 1
        await self.dead_letters.write(
            entry,
            group=self.group,
            consumer=self.consumer,
            error=reason,
            exception=error,
            bad_input=bad_input,
        )
        self.acker.ack(entry.id)  # once the letter is written: a crash in between redelivers
        if entry.delivery_count > 1:
            await self.unrouted.forget([entry.id])

    async def attempts(self, entry: RawEntry) -> int:
        """Deliveries of ``entry`` to a consumer with its handler, as far as they matter:
        looked up only once the delivery count has reached ``max_deliveries``."""
        if entry.delivery_count < self.retry.max_deliveries:
            return entry.delivery_count
        return entry.delivery_count - await self.unrouted.count(entry.id)

    async def over_limit(self, entry: RawEntry) -> bool:
        """Delivered more often than ``max_deliveries`` allows (checked before handling)."""
        return (
            entry.delivery_count > self.retry.max_deliveries
            and await self.attempts(entry) > self.retry.max_deliveries
        )

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool = False) -> None:
        """A delivery failed: dead-letter if it was the last allowed, else leave pending.

        ``outside``: the failure came from outside the handler (see :meth:`escaped`).
        """
        self.stats.failed += 1
        attempts = await self.attempts(entry)
        where = " (outside the handler)" if outside else ""
        if attempts >= self.retry.max_deliveries:
            last = describe(error, limit=None)  # the letter keeps up to MAX_ERROR_CHARS
            reason = f"failed {attempts} deliveries{where}; last error: {last}"
            await self.dead_letter(entry, reason, error)
            return
        # per handled type (a bounded set); failures outside handlers are one kind
        kind = (
            "failures outside the handler"
            if outside
            else f"failed deliveries of type {entry.type!r}"
        )
        self.summary.log(
            log, kind, logging.WARNING,
            "%s failed for %s (delivery %d of %d), left pending for redelivery: %s",
            "processing" if outside else "handler", entry.id, attempts,
            self.retry.max_deliveries, shortened(describe(error)), exc_info=error,
        )  # fmt: skip

    async def escaped(self, entries: list[RawEntry], error: Exception) -> None:
        """Processing ``entries`` raised outside their handler (a bug in streamq, a failure
        of an optional part): that is their failure, counted like a
        handler's, so that no entry escapes ``max_deliveries``."""
        for entry in entries:
            await self.failed(entry, error, outside=True)

    async def settled(self, entries: list[RawEntry]) -> None:
        """Handled: drop the unrouted-delivery records of redelivered entries (rare)."""
        redelivered = [e.id for e in entries if e.delivery_count > 1]
        if redelivered:
            await self.unrouted.forget(redelivered)

    async def no_route(self, entry: RawEntry) -> None:
        """No handler here: dead-letter malformed types, let others take unknown ones."""
        try:
            type_name = entry.check_type()
        except MessageFormatError as e:
            await self.dead_letter(entry, f"malformed entry: {e}", e, bad_input=True)
            return
        if entry.delivery_count >= self.retry.unknown_type_deliveries:
            await self.dead_letter(
                entry,
                f"no handler for type {type_name!r} after {entry.delivery_count} deliveries",
            )
            return
        await self.unrouted.record(entry.id)
        self.summary.log(
            log, "entries without a handler here", logging.WARNING,
            "no handler for type %r (entry %s); left pending for a consumer that has one",
            type_name, entry.id,
        )  # fmt: skip

    def _over_limit_reason(self, entry: RawEntry) -> str:
        return f"delivered {entry.delivery_count} times (max {self.retry.max_deliveries})"

    async def _settle(self, entry: RawEntry, error: BaseException) -> None:
        if isinstance(error, Reject):
            await self.dead_letter(entry, f"rejected: {error.reason}", error)
        elif isinstance(error, Retry):
            self.schedule_retry(entry, error.delay)
        else:
            await self.failed(entry, error)

    # -- calling handlers -----------------------------------------------------------
    async def _call_once(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        if self.handler_timeout is not None:
            with anyio.fail_after(self.handler_timeout):
                return await self._invoke(func, is_async, arg)
        return await self._invoke(func, is_async, arg)

    async def _invoke(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        try:
            if is_async:
                return await func(arg)
            return await anyio.to_thread.run_sync(func, arg, limiter=self.thread_limiter)
        except Exception:
            raise
        except BaseException as e:  # a CancelledError streamq did not ask for, SystemExit...
            raise reraise_unless_failure(e) from e

    # -- single entries -------------------------------------------------------------
    async def handle_single(self, route: Route, entry: RawEntry) -> None:
        """Handle one entry in its log context, set and reset around it."""
        await self.observer.single(self.handle_entry(route, entry), entry, route.type_name)

    async def handle_entry(self, route: Route, entry: RawEntry) -> None:
        """Handle one entry; the caller has set its log context (:data:`streamq.logs.ENTRY`)."""
        if entry.delivery_count > 1 and await self.over_limit(entry):
            await self.dead_letter(entry, self._over_limit_reason(entry))
            return
        try:  # decoded inline: an awaited helper per entry is a measurable cost
            message = self.message(route, entry)
        except Exception as e:
            await self.bad_payload(route, entry, e)
            return
        func = route.single
        assert func is not None
        started = perf_counter()
        failure: Exception | None = None
        try:
            if route.single_is_async and self.handler_timeout is None:
                await func(message)  # type: ignore[misc]  # async: checked at registration
            else:
                await self._call_once(func, route.single_is_async, message)
        except Exception as e:
            failure = e
        except BaseException as escaped:  # the hot path calls the handler directly
            failure = reraise_unless_failure(escaped)
        self.stats.handler_seconds.observe(perf_counter() - started)
        # retried outside the `except` clauses: a retry's error is not chained to the first
        error = None if failure is None else await self._after_failure(route, message, failure)
        if error is not None:
            await self._settle(entry, error)
            return
        self.stats.handled += 1
        self.acker.ack(entry.id)
        if entry.delivery_count > 1:
            await self.settled([entry])

    async def _after_failure(
        self, route: Route, message: Message[Any], first: Exception
    ) -> BaseException | None:
        if isinstance(first, HandlerSignal):
            return first
        assert route.single is not None
        return await self._retry(route.single, route.single_is_async, message, first)

    async def _retry(
        self, func: Callable[[Any], Any], is_async: bool, arg: Any, first: Exception
    ) -> BaseException | None:
        """In-process retries after a first failure; None if one succeeded, else the error."""
        if self.retry.attempts <= 1:
            return first
        self.summary.log(
            log, "in-process retries", logging.INFO,
            "handler raised %s; retrying in process", shortened(describe(first)),
        )  # fmt: skip
        self.stats.retried += 1
        return await last_failure(self._retrying, partial(self._call_once, func, is_async, arg))

    # -- batches --------------------------------------------------------------------
    async def handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        """Run a batch handler; only the entries that failed follow the failure path."""
        await self.observer.batch(self._handle_batch(route, entries), entries, route.type_name)

    async def _handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        messages = []
        # a Message's ID names its partition on a partitioned topic ("1:<ms>-<seq>"), its
        # entry's does not: outcomes go back to the entries by the Message's ID
        by_message_id: dict[str, RawEntry] = {}
        for entry in entries:
            if entry.delivery_count > 1 and await self.over_limit(entry):
                await self.dead_letter(entry, self._over_limit_reason(entry))
                continue
            try:  # each entry's data is one JSON value on its own: never joined
                message = self.message(route, entry)
            except Exception as e:
                await self.bad_payload(route, entry, e)
                continue
            messages.append(message)
            by_message_id[message.id] = entry
        if not messages:
            return
        self.stats.batch_size.observe(len(messages))
        started = perf_counter()
        failed = await self._batch_calls.run(route, messages)
        self.stats.handler_seconds.observe(perf_counter() - started)
        done = [by_message_id[m.id] for m in messages if m.id not in failed]
        self.stats.handled += len(done)
        self.acker.ack_many([entry.id for entry in done])
        await self.settled(done)
        for message_id, error in failed.items():
            await self._settle(by_message_id[message_id], error)
