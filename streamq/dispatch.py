"""Running handlers and deciding each entry's outcome.

Outcomes: success -> ack; ``Reject``, bad input or too many deliveries -> dead letter (then
ack); ``Retry(delay)`` -> re-claimed after the delay; any other failure after the in-process
retries -> left pending, to be redelivered by claiming, until ``max_deliveries``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

import anyio
import anyio.to_thread
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .acks import Acker
from .config import RetryPolicy
from .deadletter import DeadLetters
from .errors import MessageFormatError
from .message import Message, RawEntry
from .router import Route, Router
from .signals import HandlerSignal, PartialFailure, Reject, Retry
from .stats import Stats
from .unrouted import UnroutedDeliveries

log = logging.getLogger(__name__)

ScheduleRetry = Callable[[RawEntry, float], None]


def describe(error: BaseException) -> str:
    """One line naming the error; pydantic validation errors listed field by field."""
    if isinstance(error, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in error.errors()
        ]
        return f"{error.error_count()} validation error(s): " + "; ".join(parts)
    text = str(error).replace("\n", " ")
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Dispatcher:
    """Decodes entries, calls handlers with retries and applies the outcome."""

    def __init__(
        self,
        *,
        router: Router,
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
    ) -> None:
        self.router = router
        self.stream, self.group, self.consumer = stream, group, consumer
        self.retry = retry
        self.acker = acker
        self.dead_letters = dead_letters
        self.unrouted = unrouted
        self.schedule_retry = schedule_retry
        self.handler_timeout = handler_timeout
        self.thread_limiter = thread_limiter
        self.stats = stats
        self._retrying = AsyncRetrying(
            stop=stop_after_attempt(max(retry.attempts - 1, 1)),
            # exponential from `backoff`, capped, plus random jitter (works on tenacity 8 and 9)
            wait=wait_exponential(multiplier=retry.backoff, max=retry.max_backoff)  # type: ignore[arg-type]
            + wait_random(0, retry.jitter),
            retry=retry_if_not_exception_type(HandlerSignal),
            reraise=True,
        )

    # -- decoding -------------------------------------------------------------------
    def message(self, route: Route, entry: RawEntry) -> Message[Any]:
        """Build the typed Message; raises ValueError (incl. MessageFormatError) if bad."""
        return Message(
            entry.id,
            route.type_name,
            route.parse(entry.raw_data()),
            entry.decode_meta() if b"meta" in entry.fields else {},
            entry.delivery_count,
            self.stream,
            self.group,
        )

    # -- outcomes -------------------------------------------------------------------
    async def dead_letter(self, entry: RawEntry, reason: str) -> None:
        self.stats.dead_lettered += 1
        await self.dead_letters.write(entry, group=self.group, consumer=self.consumer, error=reason)
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

    async def failed(self, entry: RawEntry, error: BaseException) -> None:
        """A delivery failed: dead-letter if it was the last allowed, else leave pending."""
        self.stats.failed += 1
        attempts = await self.attempts(entry)
        if attempts >= self.retry.max_deliveries:
            await self.dead_letter(
                entry, f"failed {attempts} deliveries; last error: {describe(error)}"
            )
            return
        log.warning(
            "handler failed for %s (delivery %d of %d), left pending for redelivery: %s",
            entry.id, attempts, self.retry.max_deliveries, describe(error),
        )  # fmt: skip

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
            await self.dead_letter(entry, f"malformed entry: {e}")
            return
        if entry.delivery_count >= self.retry.unknown_type_deliveries:
            await self.dead_letter(
                entry,
                f"no handler for type {type_name!r} after {entry.delivery_count} deliveries",
            )
            return
        await self.unrouted.record(entry.id)
        log.warning(
            "no handler for type %r (entry %s); left pending for a consumer that has one",
            type_name, entry.id,
        )  # fmt: skip

    def _over_limit_reason(self, entry: RawEntry) -> str:
        return f"delivered {entry.delivery_count} times (max {self.retry.max_deliveries})"

    # -- single entries -------------------------------------------------------------
    async def handle_single(self, route: Route, entry: RawEntry) -> None:
        if entry.delivery_count > 1 and await self.over_limit(entry):
            await self.dead_letter(entry, self._over_limit_reason(entry))
            return
        try:
            message = self.message(route, entry)
        except ValueError as e:
            await self.dead_letter(entry, f"invalid payload for {route.type_name!r}: {describe(e)}")
            return
        func = route.single
        assert func is not None
        started = perf_counter()
        try:
            if route.single_is_async and self.handler_timeout is None:
                await func(message)  # type: ignore[misc]  # async: checked at registration
            else:
                await self._call_once(func, route.single_is_async, message)
        except Exception as first:
            self.stats.handler_seconds.observe(perf_counter() - started)
            error = (
                first
                if isinstance(first, HandlerSignal)
                else await self._retry(func, route.single_is_async, message, first)
            )
            if error is not None:
                await self._settle(entry, error)
                return
        else:
            self.stats.handler_seconds.observe(perf_counter() - started)
        self.stats.handled += 1
        self.acker.ack(entry.id)
        if entry.delivery_count > 1:
            await self.settled([entry])

    async def _settle(self, entry: RawEntry, error: BaseException) -> None:
        if isinstance(error, Reject):
            await self.dead_letter(entry, f"rejected: {error.reason}")
        elif isinstance(error, Retry):
            self.schedule_retry(entry, error.delay)
        else:
            await self.failed(entry, error)

    async def _retry(
        self, func: Callable[[Any], Any], is_async: bool, arg: Any, first: Exception
    ) -> BaseException | None:
        """In-process retries after a first failure; None if one succeeded, else the error."""
        if self.retry.attempts <= 1:
            return first
        log.info("handler raised %s; retrying in process", describe(first))
        self.stats.retried += 1
        try:
            async for attempt in self._retrying.copy():
                with attempt:
                    await self._call_once(func, is_async, arg)
        except Exception as e:
            return e
        return None

    async def _call_once(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        if self.handler_timeout is not None:
            with anyio.fail_after(self.handler_timeout):
                return await self._invoke(func, is_async, arg)
        return await self._invoke(func, is_async, arg)

    async def _invoke(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        if is_async:
            return await func(arg)
        return await anyio.to_thread.run_sync(func, arg, limiter=self.thread_limiter)

    # -- batches --------------------------------------------------------------------
    async def handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        """Run a batch handler; only the entries that failed follow the failure path."""
        fresh = []
        for entry in entries:
            if entry.delivery_count > 1 and await self.over_limit(entry):
                await self.dead_letter(entry, self._over_limit_reason(entry))
            else:
                fresh.append(entry)
        messages = self._batch_messages(route, fresh)
        if messages is None:  # some payload is bad: decode one by one to find it
            messages = []
            for entry in fresh:
                try:
                    messages.append(self.message(route, entry))
                except ValueError as e:
                    reason = f"invalid payload for {route.type_name!r}: {describe(e)}"
                    await self.dead_letter(entry, reason)
        if not messages:
            return
        self.stats.batch_size.observe(len(messages))
        started = perf_counter()
        failed = await self._run_batch(route, messages)
        self.stats.handler_seconds.observe(perf_counter() - started)
        done = (
            [m.id for m in messages if m.id not in failed] if failed else [m.id for m in messages]
        )
        self.stats.handled += len(done)
        self.acker.ack_many(done)
        await self.settled([e for e in fresh if e.id not in failed] if failed else fresh)
        if failed:
            by_id = {entry.id: entry for entry in entries}
            for entry_id, error in failed.items():
                await self._settle(by_id[entry_id], error)

    def _batch_messages(self, route: Route, entries: list[RawEntry]) -> list[Message[Any]] | None:
        """Decode a whole batch with one validation call; None if any entry is bad."""
        datas = [entry.fields.get(b"data") for entry in entries]
        if route.parse_list is None or None in datas:
            return None
        try:
            values = route.parse_list(b"[" + b",".join(datas) + b"]")  # type: ignore[arg-type]
            metas = [e.decode_meta() if b"meta" in e.fields else {} for e in entries]
        except ValueError:
            return None
        if len(values) != len(entries):  # a payload that was not one JSON value
            return None
        type_name, stream, group = route.type_name, self.stream, self.group
        return [
            Message(e.id, type_name, v, m, e.delivery_count, stream, group)
            for e, v, m in zip(entries, values, metas, strict=True)
        ]

    async def _run_batch(
        self, route: Route, messages: list[Message[Any]]
    ) -> dict[str, BaseException]:
        """Call the batch handler, retrying only what failed; return ID -> last error."""
        assert route.batch is not None
        remaining = messages
        errors: dict[str, BaseException] = {}
        for attempt in range(1, self.retry.attempts + 1):
            errors = await self._batch_attempt(route, remaining)
            if not errors or any(isinstance(e, HandlerSignal) for e in errors.values()):
                return errors
            remaining = [m for m in remaining if m.id in errors]
            if attempt < self.retry.attempts:
                delay = min(self.retry.backoff * 2 ** (attempt - 1), self.retry.max_backoff)
                await anyio.sleep(delay)
        return errors

    async def _batch_attempt(
        self, route: Route, messages: list[Message[Any]]
    ) -> dict[str, BaseException]:
        assert route.batch is not None
        try:
            result = await self._call_once(route.batch, route.batch_is_async, messages)
        except PartialFailure as partial:
            result = partial
        except (Reject, Retry) as signal:
            return {m.id: signal for m in messages}
        except Exception as e:
            log.warning("batch handler for %r failed: %s", route.type_name, describe(e))
            return {m.id: e for m in messages}
        if isinstance(result, PartialFailure):
            ids = {m.id for m in messages}
            return {
                entry_id: RuntimeError(reason)
                for entry_id, reason in result.failed.items()
                if entry_id in ids
            }
        return {}
