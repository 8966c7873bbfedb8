"""Running handlers: decoding each entry into its Message, calling its handler (or batch
handler) with the in-process retries, and passing each outcome to the mode's outcome policy
(:mod:`streamq.consume.outcomes`: what success, a failure, a signal or a bad payload do).
The one dispatcher of every mode: shared, ordered and fan-out differ only in that policy.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from .._log_summary import LogSummary, shortened
from ..config import RetryPolicy
from ..message import Message, OutputStaging, RawEntry, decode_key
from ..payload.reading import read_payload, waits_for_newer_consumer
from ..payload.wire import ENC, KID, VER
from ..signals import HandlerSignal
from ..wire.replying import REQUEST
from .batch_calls import BatchCalls
from .context import Place
from .failures import describe, reraise_unless_failure
from .observe import Observer
from .outcomes import Outcomes
from .retrying import last_failure, retrying
from .routes import Route, Routes
from .stats import Stats

log = logging.getLogger(__name__)


class Dispatcher:
    """Decodes entries, calls handlers with retries and applies the outcome."""

    def __init__(
        self,
        *,
        router: Routes,
        group: str,
        retry: RetryPolicy,
        outcomes: Outcomes,
        handler_timeout: float | None,
        thread_limiter: anyio.CapacityLimiter,
        stats: Stats,
        bisect_batches: bool = True,
        place: Place,
        summary: LogSummary,
        fencing_token: int | None = None,
        staging: OutputStaging | None = None,
    ) -> None:
        self.router = router
        self._staging = staging  # what msg.publish stages outputs with
        self.group = group
        # what a Message says of where it comes from: the topic, and the partition if any
        self._topic, self._partition = place.topic, (place.partition or 0) % place.partitions
        self._id_prefix = place.id_prefix
        self._level = place.level  # a topic with priorities: the stream's level, else None
        self._fencing_token = fencing_token  # ordered mode: the partition's lease
        self.retry = retry
        self.outcomes = outcomes
        self._ack = outcomes.ack  # the hot path: the acker's own bound method
        self.handler_timeout = handler_timeout
        self.thread_limiter = thread_limiter
        self.stats = stats
        # the records each failing entry makes, summarised (streamq._log_summary)
        self.summary = summary
        self.observer = Observer()  # log context; trace spans are a middleware (.traced)
        # singles: the first call is made outside tenacity (the hot path), these are the rest
        self._retrying = retrying(retry, retry.attempts - 1, made=1)
        # batches: which entries failed, after retries and bisection
        self._batch_calls = BatchCalls(
            call_once=self._call_once, retry=retry, bisect=bisect_batches, summary=summary
        )

    # -- decoding -------------------------------------------------------------------
    def message(self, route: Route, entry: RawEntry) -> Message[Any]:
        """Build the typed Message; raises whatever decoding or validation raised."""
        prefix, fields, plain = self._id_prefix, entry.fields, route.plain
        if plain is not None and ENC not in fields and VER not in fields and KID not in fields:
            data = plain(entry.raw_data())  # the usual entry: plain JSON, version 1
            meta = entry.decode_meta() if b"meta" in fields else {}
        else:
            data, meta = read_payload(route, entry)  # enc/kid decoded, ver upcast, validated
        raw_key = fields.get(b"key")
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
            self._fencing_token,
            self._staging,
            self._level,
        )

    async def bad_payload(self, route: Route, entry: RawEntry, error: Exception) -> None:
        """Any error raised while decoding or validating (a validator's KeyError too) is
        that entry's failure: dead-lettered with the reason."""
        if waits_for_newer_consumer(error, entry, self.retry):  # a newer schema version
            await self.outcomes.left_for_newer(entry)
            return
        reason = f"invalid payload for {route.type_name!r}: {describe(error, limit=None)}"
        await self.outcomes.dead_letter(entry, reason, error, bad_input=True)

    # -- outcomes -------------------------------------------------------------------
    async def escaped(self, entries: list[RawEntry], error: Exception) -> None:
        """Processing ``entries`` raised outside their handler (a bug in streamq, a failure
        of an optional part): that is their failure, counted like a handler's, so that no
        entry escapes ``max_deliveries``."""
        for entry in entries:
            await self.outcomes.failed(entry, error, outside=True)

    async def no_route(self, entry: RawEntry) -> None:
        await self.outcomes.no_route(entry)

    # -- calling handlers -----------------------------------------------------------
    async def _in_thread_abandonable(
        self, func: Callable[[Any], Any], seconds: float, arg: Any
    ) -> Any:
        """A plain ``def`` handler under ``handler_timeout``: a thread cannot be cancelled,
        so an attempt past the timeout (or a stop's cancel) is abandoned: it counts as
        failed, and its thread runs to its end and keeps its slot of the thread limiter
        until then, so no more than ``concurrency`` handler threads ever run. The timeout
        starts once the attempt has its slot."""
        limiter, slot = self.thread_limiter, object()
        await limiter.acquire_on_behalf_of(slot)
        lock, state = threading.Lock(), {"started": False, "abandoned": False}

        def release() -> None:
            # RuntimeError: the event loop has ended, nothing waits for the slot
            with contextlib.suppress(RuntimeError):
                anyio.from_thread.run_sync(limiter.release_on_behalf_of, slot)

        def run() -> Any:
            with lock:
                if state["abandoned"]:  # abandoned before it started: the slot is back
                    return None
                state["started"] = True
            try:
                return func(arg)
            finally:
                release()

        try:
            with anyio.fail_after(seconds):
                return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except BaseException:
            with lock:
                state["abandoned"] = True
                started = state["started"]
            if not started:
                limiter.release_on_behalf_of(slot)
            raise

    async def _call_once(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        timeout = self.handler_timeout
        if timeout is None:
            return await self._invoke(func, is_async, arg)
        if is_async:
            with anyio.fail_after(timeout):
                return await self._invoke(func, is_async, arg)
        return await self._invoke(functools.partial(self._in_thread_abandonable, func, timeout),
                                  True, arg)  # fmt: skip

    async def _invoke(self, func: Callable[[Any], Any], is_async: bool, arg: Any) -> Any:
        try:
            if is_async:
                return await func(arg)
            return await anyio.to_thread.run_sync(func, arg, limiter=self.thread_limiter)
        except Exception:
            raise
        except BaseException as e:  # a CancelledError streamq did not ask for, SystemExit...
            raise reraise_unless_failure(e) from e

    async def handle_one(self, route: Route | None, entry: RawEntry) -> None:
        """Handle ``entry`` alone, whatever its type's handler: a type with only a batch
        handler runs as a batch of one (ordered mode: its key's order is kept)."""
        if route is None:
            await self.no_route(entry)
        elif route.single is not None:
            await self.handle_entry(route, entry)
        else:
            await self.handle_batch(route, [entry])

    # -- single entries -------------------------------------------------------------
    async def handle_entry(self, route: Route, entry: RawEntry) -> None:
        """Handle one entry; the caller has set its log context (:data:`streamq.logs.ENTRY`)."""
        if entry.delivery_count > 1 and await self.outcomes.past_limit(entry):
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
                result = await func(message)  # type: ignore[misc]  # async: checked at registration
            else:
                result = await self._call_once(func, route.single_is_async, message)
        except Exception as e:
            failure = e
        except BaseException as escaped:  # the hot path calls the handler directly
            failure = reraise_unless_failure(escaped)
        self.stats.handler_seconds.observe(perf_counter() - started)
        if failure is not None:
            # retried outside the `except` clauses: a retry's error is not chained to the first
            error, result = await self._after_failure(route, message, failure)
            if error is not None:
                await self.outcomes.settle(entry, error)
                return
        self.stats.handled += 1
        meta = message.meta
        if meta and REQUEST in meta:  # mq.request: the return value is the reply
            await self.outcomes.replied(entry, meta, result, message._outputs)
        elif message._outputs is None:
            self._ack(entry.id)
        else:  # msg.publish staged outputs: written with the ack
            self.outcomes.ack_with(entry.id, message._outputs)
        if entry.delivery_count > 1:
            await self.outcomes.settled([entry])

    async def _after_failure(
        self, route: Route, message: Message[Any], first: Exception
    ) -> tuple[BaseException | None, Any]:
        """The in-process retries: (None, the handler's result) if one succeeded, else
        (the error, None)."""
        if isinstance(first, HandlerSignal):
            return first, None
        func, is_async = route.single, route.single_is_async
        assert func is not None
        results: list[Any] = []

        async def call() -> None:
            message._outputs = None  # a failed attempt's outputs go with it
            results.append(await self._call_once(func, is_async, message))

        error = await self._retry(call, first)
        return error, (results[-1] if error is None and results else None)

    async def _retry(
        self, call: Callable[[], Awaitable[Any]], first: Exception
    ) -> BaseException | None:
        """In-process retries after a first failure; None if one succeeded, else the error."""
        if self.retry.attempts <= 1:
            return first
        self.summary.log(
            log, "in-process retries", logging.INFO,
            "handler raised %s; retrying in process", shortened(describe(first)),
        )  # fmt: skip
        self.stats.retried += 1
        return await last_failure(self._retrying, call)

    # -- batches --------------------------------------------------------------------
    async def handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        """Run a batch handler; only the entries that failed follow the failure path."""
        with self.outcomes.batch(route.type_name):
            await self.observer.batch(self._handle_batch(route, entries), entries, route.type_name)

    async def _handle_batch(self, route: Route, entries: list[RawEntry]) -> None:
        messages = []
        # a Message's ID names its partition on a partitioned topic ("1:<ms>-<seq>"), its
        # entry's does not: outcomes go back to the entries by the Message's ID
        by_message_id: dict[str, RawEntry] = {}
        for entry in entries:
            if entry.delivery_count > 1 and await self.outcomes.past_limit(entry):
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
        outcomes = self.outcomes
        requests = [m for m in messages if m.meta and REQUEST in m.meta and m.id not in failed]
        for request in requests:  # handled by a batch handler: answered with None
            entry = by_message_id[request.id]
            done.remove(entry)
            await outcomes.replied(entry, request.meta, None, request._outputs)
        staged = [m for m in messages if m._outputs is not None and m.id not in failed]
        for message in staged:  # each entry's outputs go with its own ack
            if not (message.meta and REQUEST in message.meta):
                entry = by_message_id[message.id]
                done.remove(entry)
                outcomes.ack_with(entry.id, message._outputs)  # type: ignore[arg-type]
        outcomes.ack_many([entry.id for entry in done])
        await outcomes.settled(done)
        for message_id, error in failed.items():
            await outcomes.settle(by_message_id[message_id], error)
