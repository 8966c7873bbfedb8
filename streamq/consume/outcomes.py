"""Outcome policies: what a mode does with each outcome of an entry.

The one :class:`~streamq.consume.dispatch.Dispatcher` decodes entries and calls handlers in
every mode; what follows from the call is the mode's outcome policy, one object of a class
below, chosen when the consumer is built (:mod:`streamq.consume.build`)::

    outcome                   shared (group)         ordered (group, fenced)      fan-out (no group)
    handled                   ack                    fenced ack                   nothing
    handled, with outputs     outputs + ack in one   outputs + fenced ack in one  (msg.publish
                              script                 script                       raises)
    failed, deliveries left   left pending:          retried in place after       logged, counted
                              redelivered by a claim the backoff (its key waits)
    Retry(delay)              re-claimed after delay retried in place after delay logged, counted
    Throttle(retry_after)     waits in the flow      retried in place after it    logged, counted
                              stage, then runs       (its key waits), no          (an error: no
                              again, no delivery     delivery counted             group)
    Reject / bad payload      dead letter + ack      dead letter + fenced ack     logged, counted
    past max_deliveries       dead letter + ack      dead letter, or halt the key logged, counted
    no handler for its type   left for a consumer    left for a consumer          skipped, counted
                              that has one           that has one
    a newer schema version    left for a consumer    left for a consumer          skipped, counted
                              that knows it          that knows it

The two group policies are one class (:class:`GroupOutcomes`) wired differently: the acker
(plain or fenced), what ``Retry(delay)`` does (a re-claim, or the lane's backoff) and, with
``on_poison="halt"``, a halt instead of a dead letter at the delivery limit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from .._log_summary import LogSummary, shortened
from ..config import RetryPolicy
from ..errors import MessageFormatError
from ..message import RawEntry
from ..signals import HandlerSignal, Reject, Retry, Throttle
from ..topic.deadletter import DeadLetters
from ..wire.replying import is_request
from .failures import describe
from .stats import Stats
from .unrouted import UnroutedDeliveries

if TYPE_CHECKING:
    from .outputs import Output
    from .staging import Replies

log = logging.getLogger(__name__)

# what ``Retry(delay)`` does in a group: re-claimed after the delay, or retried in place
RetryLater = Callable[[RawEntry, float], None]
# ordered mode with on_poison="halt": the entry's key halts (entry, reason, last error)
Halt = Callable[[RawEntry, str, BaseException | None], None]
# the handler raised Throttle: its key (or type) is held back, the entry runs after it
Throttled = Callable[[RawEntry, Throttle], Awaitable[None]]


def _named(entry: RawEntry, id_prefix: str | None) -> str:
    """``entry``'s ID as its Message and the CLI name it (naming its partition, if any)."""
    return entry.id if id_prefix is None else id_prefix + entry.id


class Outcomes(Protocol):
    """One mode's outcome policy (see the module's table)."""

    stats: Stats

    def ack(self, entry_id: str) -> None:
        """Handled: called once per entry on the hot path (no I/O)."""

    def ack_many(self, entry_ids: list[str]) -> None: ...

    def ack_with(self, entry_id: str, outputs: list[Output]) -> None:
        """Handled, with outputs its handler staged: written with the ack (no I/O here)."""

    async def settled(self, entries: list[RawEntry]) -> None:
        """After ``entries`` were handled (some may have been delivered before)."""

    async def replied(
        self, entry: RawEntry, meta: dict[str, str], result: Any, outputs: list[Output] | None
    ) -> None:
        """A request (``mq.request``) handled: its reply, its outputs if any, and its ack."""

    async def past_limit(self, entry: RawEntry) -> bool:
        """Before a call: whether ``entry`` is past ``max_deliveries`` (its limit outcome
        is then applied, and it is not handled)."""

    async def dead_letter(
        self, entry: RawEntry, reason: str, error: BaseException | None = None, *,
        bad_input: bool = False,
    ) -> None: ...  # fmt: skip

    async def settle(self, entry: RawEntry, error: BaseException) -> None:
        """The handler failed (after the in-process retries) or raised a signal."""

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool) -> None:
        """A failure; ``outside``: raised outside the handler (a bug, an optional part)."""

    async def no_route(self, entry: RawEntry) -> None:
        """No handler here for ``entry``'s type (or no valid type)."""

    async def left_for_newer(self, entry: RawEntry) -> None:
        """``entry``'s schema version is newer than its handler's here: left for a consumer
        that knows it (the payload reader has logged it, once per version)."""

    def batch(self, type_name: str) -> AbstractContextManager[None]:
        """Around the outcomes of one batch."""


class GroupOutcomes:
    """Shared and ordered mode: acked, redelivered, dead-lettered (or the key halted)."""

    def __init__(
        self,
        *,
        ack: Callable[[str], None],
        ack_many: Callable[[list[str]], None],
        ack_with: Callable[[str, list[Output]], None],
        group: str,
        consumer: str,
        retry: RetryPolicy,
        dead_letters: DeadLetters,
        unrouted: UnroutedDeliveries,
        retry_later: RetryLater,
        stats: Stats,
        summary: LogSummary,
        halt: Halt | None = None,
        throttled: Throttled | None = None,
        replier: Replies | None = None,
        id_prefix: str | None = None,
        ack_with_now: Callable[[str, list[Output]], Awaitable[None]] | None = None,
        left_pending: Callable[[str], None] = lambda _id: None,
    ) -> None:
        """``id_prefix``: what a Message ID of this stream starts with (``"2:"``, the
        stream's index on a partitioned topic), for the IDs its records name; the
        claimer is told of each entry ``left_pending`` for a redelivery by claiming."""
        self.ack, self.ack_many = ack, ack_many  # bound methods of the acker: the hot path
        self.ack_with = ack_with
        self._group, self._consumer, self._retry = group, consumer, retry
        self._dead_letters, self._unrouted, self._retry_later = dead_letters, unrouted, retry_later
        self.stats, self._summary, self._halt = stats, summary, halt
        self._throttled, self._replier, self._id_prefix = throttled, replier, id_prefix
        self._ack_with_now = ack_with_now  # a request's reply: written by the worker if it may
        self._left_pending = left_pending

    async def settled(self, entries: list[RawEntry]) -> None:
        """Drop the unrouted-delivery records of redelivered entries (rare)."""
        redelivered = [e.id for e in entries if e.delivery_count > 1]
        if redelivered:
            await self._unrouted.forget(redelivered)

    async def replied(
        self, entry: RawEntry, meta: dict[str, str], result: Any, outputs: list[Output] | None
    ) -> None:
        replier = self._replier
        if replier is not None and replier.staged:  # the reply goes with the ack, as an output
            outputs = [] if outputs is None else outputs
            outputs.append(replier.output(entry, meta, result))
            if self._ack_with_now is not None:  # the requester waits: no hop to the acker
                await self._ack_with_now(entry.id, outputs)
                return
        if outputs is not None:  # written with the ack
            self.ack_with(entry.id, outputs)
            return
        if replier is not None:
            await replier.handled(entry, meta, result)
            if replier.with_ack:
                return
        self.ack(entry.id)

    async def _reply_failure(self, entry: RawEntry, reason: str) -> None:
        """A dead-lettered request is answered with why (``mq.request`` raises it)."""
        if self._replier is None or b"meta" not in entry.fields:
            return
        try:
            meta = entry.decode_meta()
        except MessageFormatError:
            return
        if is_request(meta):
            await self._replier.failed(entry, meta, reason)

    async def attempts(self, entry: RawEntry) -> int:
        """Deliveries of ``entry`` to a consumer with its handler, as far as they matter:
        looked up only once the delivery count has reached ``max_deliveries``."""
        if entry.delivery_count < self._retry.max_deliveries:
            return entry.delivery_count
        return entry.delivery_count - await self._unrouted.count(entry.id)

    async def past_limit(self, entry: RawEntry) -> bool:
        limit = self._retry.max_deliveries
        if entry.delivery_count <= limit:
            return False
        attempts = await self.attempts(entry)
        if attempts <= limit:
            return False
        if self._halt is not None:  # its earlier owner halted on it, or crashed on it
            self._halt(entry, f"delivered {attempts} times (max {limit})", None)
        else:
            await self.dead_letter(entry, f"delivered {entry.delivery_count} times (max {limit})")
        return True

    async def dead_letter(
        self,
        entry: RawEntry,
        reason: str,
        error: BaseException | None = None,
        *,
        bad_input: bool = False,
    ) -> None:
        await self._dead_letters.write(
            entry, group=self._group, consumer=self._consumer, error=reason, exception=error,
            bad_input=bad_input,
        )  # fmt: skip
        self.stats.dead_lettered += 1  # written: a failed write leaves the entry pending
        self.ack(entry.id)  # once the letter is written: a crash in between redelivers
        if entry.delivery_count > 1:
            await self._unrouted.forget([entry.id])
        await self._reply_failure(entry, reason)

    async def settle(self, entry: RawEntry, error: BaseException) -> None:
        if isinstance(error, Reject):
            await self.dead_letter(entry, f"rejected: {error.reason}", error)
        elif isinstance(error, Retry):
            self._retry_later(entry, error.delay)
        elif isinstance(error, Throttle) and self._throttled is not None:
            await self._throttled(entry, error)  # no failure, no delivery counted
        else:
            await self.failed(entry, error, outside=False)

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool) -> None:
        """Dead-letter (or halt) if it was the last delivery allowed, else leave it."""
        self.stats.failed += 1
        attempts = await self.attempts(entry)
        where = " (outside the handler)" if outside else ""
        if attempts >= self._retry.max_deliveries:
            last = describe(error, limit=None)  # the letter keeps up to MAX_ERROR_CHARS
            reason = f"failed {attempts} deliveries{where}; last error: {last}"
            if self._halt is not None:
                self._halt(entry, reason, error)
            else:
                await self.dead_letter(entry, reason, error)
            return
        # per handled type (a bounded set); failures outside handlers are one kind
        kind = f"failed deliveries of type {entry.type!r}"
        kind = "failures outside the handler" if outside else kind
        self._summary.log(
            log, kind, logging.WARNING,
            "%s failed for %s (delivery %d of %d), left pending for redelivery: %s",
            "processing" if outside else "handler", _named(entry, self._id_prefix), attempts,
            self._retry.max_deliveries, shortened(describe(error)), exc_info=error,
        )  # fmt: skip
        self._left_pending(entry.id)

    async def no_route(self, entry: RawEntry) -> None:
        """Dead-letter malformed types; leave unknown ones to a consumer that has one."""
        try:
            type_name = entry.check_type()
        except MessageFormatError as e:
            await self.dead_letter(entry, f"malformed entry: {e}", e, bad_input=True)
            return
        if entry.delivery_count >= self._retry.unknown_type_deliveries:
            await self.dead_letter(
                entry,
                f"no handler for type {type_name!r} after {entry.delivery_count} deliveries",
            )
            return
        await self._unrouted.record(entry.id)
        self._left_pending(entry.id)
        self._summary.log(
            log, "entries without a handler here", logging.WARNING,
            "no handler for type %r (entry %s); left pending for a consumer that has one",
            type_name, _named(entry, self._id_prefix),
        )  # fmt: skip

    async def left_for_newer(self, entry: RawEntry) -> None:
        await self._unrouted.record(entry.id)  # not a delivery to a handler that knows it
        self._left_pending(entry.id)

    @contextmanager
    def batch(self, type_name: str) -> Iterator[None]:
        yield


# The failures of the fan-out batch being handled in this task (None: not in a batch): a
# batch's failed entries are logged together, in one WARNING.
_batch_failures: ContextVar[list[tuple[str, str, BaseException | None]] | None] = ContextVar(
    "streamq_fanout_batch_failures", default=None
)


class FanoutOutcomes:
    """Fan-out (``group=None``): nothing is pending, acked or dead-lettered. An entry that
    still fails after its in-process retries (or does not validate, or is rejected) is
    logged at WARNING and counted in ``failed``; the subscriber goes on."""

    def __init__(
        self, stream: str, id_prefix: str | None, attempts: int, stats: Stats, summary: LogSummary
    ) -> None:
        self._stream, self._id_prefix, self._attempts = stream, id_prefix, attempts
        self.stats, self._summary = stats, summary

    def ack(self, entry_id: str) -> None:
        return None

    def ack_many(self, entry_ids: list[str]) -> None:
        return None

    def ack_with(self, entry_id: str, outputs: list[Output]) -> None:
        return None  # never staged: msg.publish raises in a fan-out handler

    async def settled(self, entries: list[RawEntry]) -> None:
        return None

    async def replied(
        self, entry: RawEntry, meta: dict[str, str], result: Any, outputs: list[Output] | None
    ) -> None:
        return None  # a request needs a group: a fan-out subscriber does not answer it

    async def past_limit(self, entry: RawEntry) -> bool:
        return False  # every entry is delivered once

    async def dead_letter(
        self, entry: RawEntry, reason: str, error: BaseException | None = None, *,
        bad_input: bool = False,
    ) -> None:  # fmt: skip
        self.stats.failed += 1  # every outcome that would dead-letter in a group
        in_batch = _batch_failures.get()
        if in_batch is not None:
            in_batch.append((_named(entry, self._id_prefix), reason, error))
            return
        self._summary.log(  # a handler failing on every entry: the first in full, then counts
            log, f"fan-out failures of type {entry.type!r}", logging.WARNING,
            "fan-out handler failed for %s on %s (not redelivered: no consumer group): %s",
            _named(entry, self._id_prefix), self._stream, reason, exc_info=error,
        )  # fmt: skip

    async def settle(self, entry: RawEntry, error: BaseException) -> None:
        await self.failed(entry, error, outside=False)  # Reject and Retry(delay) alike

    async def failed(self, entry: RawEntry, error: BaseException, *, outside: bool) -> None:
        if isinstance(error, Throttle):
            reason = (
                f"the handler raised {describe(error)}, which needs a consumer group: a "
                "fan-out subscriber holds nothing back and does not handle the entry again"
            )
        elif isinstance(error, HandlerSignal):  # Reject, Retry: not retried in process
            reason = f"the handler raised {describe(error)} (no redelivery without a group)"
        else:
            reason = f"failed after {self._attempts} attempt(s): {describe(error)}"
        await self.dead_letter(entry, reason, error)

    async def no_route(self, entry: RawEntry) -> None:
        self.skip(entry)  # (the subscriber skips them before its workers)

    async def left_for_newer(self, entry: RawEntry) -> None:
        self.stats.skipped += 1

    def skip(self, entry: RawEntry) -> None:
        """A type this subscriber does not handle is skipped (counted in ``skipped``, logged
        once per type, then summarised: no other consumer of a group could take it); an
        entry without a valid type is bad input, counted in ``failed``."""
        try:
            type_name = entry.check_type()
        except MessageFormatError as e:
            self.stats.failed += 1
            self._summary.log(
                log, "malformed entries", logging.WARNING,
                "fan-out subscriber skipped malformed entry %s on %s: %s",
                _named(entry, self._id_prefix), self._stream, e,
            )  # fmt: skip
            return
        self.stats.skipped += 1
        self._summary.log(
            log, f"entries of type {type_name!r} skipped (no handler here)", logging.WARNING,
            "no handler for type %r in this fan-out subscriber: skipped %s on %s (counted in "
            "skipped)", type_name, _named(entry, self._id_prefix), self._stream,
        )  # fmt: skip

    @contextmanager
    def batch(self, type_name: str) -> Iterator[None]:
        failures: list[tuple[str, str, BaseException | None]] = []
        token = _batch_failures.set(failures)
        try:
            yield
        finally:
            _batch_failures.reset(token)
        if failures:
            first_id, reason, error = failures[0]
            log.warning(
                "fan-out batch handler for %r failed for %d entries on %s (not redelivered: "
                "no consumer group): %s; first: %s",
                type_name, len(failures), self._stream, reason, first_id, exc_info=error,
            )  # fmt: skip
