"""The dead-letter stream ``streamq:{<stream>}:dlq``: write, list, replay, purge.

A dead letter keeps every wire field of its entry as it was (type, raw data, meta, the
publish key, and ``ver``/``enc``/``kid`` when present), the original ID, the group and
consumer that gave up, the error text and the number of deliveries, and, when the failure was an
exception, its qualified class name (``error_type``) and a bounded traceback. Writing is
XADD to the dead-letter stream; the consumer acknowledges the original through its acker
only once that XADD has succeeded: a crash between the two leaves the entry pending (so it
is dead-lettered twice at worst), never lost.

Replaying removes the letter and publishes its wire fields again in one script (an entry
encrypted with an older key of the queue's keyring is encrypted again with the current
one), so a letter is replayed once even when two operators replay at the same time, and a
keyed entry comes back with its key (ordered with it again, in the partition the key
picks: the partition it was published to, whose dead-letter stream holds the letter).
Replaying all takes a snapshot: the letters up to the last one present when it starts;
letters dead-lettered meanwhile (a consumer still failing on the replayed entries) stay
for the next replay.
"""

from __future__ import annotations

import builtins
import logging
import time
from dataclasses import dataclass, field
from traceback import format_exception
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from .._ids import StreamId
from .._log_summary import LogSummary, shortened
from .._text import keep_end, keep_start
from ..errors import MessageNotFoundError
from ..message import PUBLISH_MARKER, WIRE_FIELDS, RawEntry
from ..signals import HandlerSignal
from ..wire.excerpts import range_excerpts
from ..wire.keys import Keys
from ..wire.wrong_type import refused_if_wrong_type, unless_wrong_type

if TYPE_CHECKING:
    from ..payload.keyring import Keyring

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 4000
# A few KB: enough for the frames nearest the raise, small enough for a stream entry.
MAX_TRACEBACK_CHARS = 4096
REPLAY_PAGE = 500

# Remove the letter, and publish it again only if this call removed it (two replays of one
# letter publish it once). KEYS: dead-letter stream, stream. ARGV: letter ID, field, value...
_REPLAY = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
"""


def _text(raw: object) -> str:
    """A reply value as text, whatever was written there (never raises)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return str(raw)


def _prefix_text(raw: bytes) -> str:
    """The first bytes of a UTF-8 value as text: a character cut in two at the end is
    left out, not shown as a replacement character."""
    for end in range(len(raw), max(len(raw) - 4, 0), -1):
        try:
            return raw[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return _text(raw)


def _int(raw: str | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of the dead-letter stream.

    ``error_type`` (e.g. ``builtins.KeyError``) and ``traceback`` are set when the failure
    was an exception; ``attempts`` and ``dead_at_ms`` are 0 when the letter lacks them (or
    holds something else: letters written by hand are listed too). ``key``: the entry's
    publish key (None when it had none). ``enc``, ``kid``, ``ver``: the entry's payload
    fields (docs/reference/wire-format.md), None when it had none: ``data`` is then as
    stored, compressed or encrypted (:func:`streamq.payload.display.shown_data` decodes
    it). ``cut``: the full size in bytes of each field listed cut short
    (:meth:`DeadLetters.list` with a ``limit``).
    """

    id: str
    original_id: str
    type: str | None
    data: str | None
    meta: str | None
    group: str
    consumer: str
    error: str
    attempts: int
    dead_at_ms: int
    error_type: str | None = None
    traceback: str | None = None
    key: str | None = None
    enc: str | None = None
    kid: str | None = None
    ver: str | None = None
    cut: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_fields(
        cls, entry_id: bytes | str, fields: dict[Any, Any], cut: dict[bytes, int] | None = None
    ) -> DeadLetter:
        """Read a dead-letter entry; never raises, fills what the entry has. ``cut``: the
        full sizes of the fields given cut short."""

        def value(name: bytes) -> str | None:
            raw = fields.get(name)
            if raw is None:
                return None
            return _prefix_text(raw) if cut and name in cut else _text(raw)

        return cls(
            id=_text(entry_id),
            original_id=value(b"original_id") or "",
            type=value(b"type"),
            data=value(b"data"),
            meta=value(b"meta"),
            group=value(b"group") or "",
            consumer=value(b"consumer") or "",
            error=value(b"error") or "",
            attempts=_int(value(b"attempts")),
            dead_at_ms=_int(value(b"dead_at_ms")),
            error_type=value(b"error_type"),
            traceback=value(b"traceback"),
            key=value(b"key"),
            enc=value(b"enc"),
            kid=value(b"kid"),
            ver=value(b"ver"),
            cut={_text(name): size for name, size in (cut or {}).items()},
        )


def qualified_name(exception: BaseException) -> str:
    """``module.QualName`` of the exception's class, e.g. ``builtins.KeyError``."""
    cls = type(exception)
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls.__name__)}"


def format_traceback(exception: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """The formatted traceback, cut to ``limit`` chars from the start (the frames nearest
    the raise are at the end); never raises."""
    try:
        text = "".join(format_exception(exception))
    except Exception:  # a broken __str__ or __notes__ somewhere in the chain
        text = qualified_name(exception)
    return keep_end(text, limit)


def dead_letter_fields(
    entry: RawEntry,
    *,
    group: str,
    consumer: str,
    error: str,
    exception: BaseException | None = None,
) -> dict[bytes | str, bytes | str]:
    """The fields of the dead letter of ``entry``: its wire fields as they are, then the
    letter's own (a field outside the wire format is named in ``error``, not copied)."""
    fields: dict[bytes | str, bytes | str] = {
        name: entry.fields[name] for name in WIRE_FIELDS if name in entry.fields
    }
    extra = sorted(
        k.decode("utf-8", "replace")
        for k in entry.fields
        if k not in WIRE_FIELDS and k != PUBLISH_MARKER
    )
    if extra:
        error = f"{error} (other fields not kept: {', '.join(extra)})"
    fields.update(
        original_id=entry.id,
        group=group,
        consumer=consumer,
        error=_utf8(keep_start(error, MAX_ERROR_CHARS)),
        attempts=str(entry.delivery_count),
        dead_at_ms=str(int(time.time() * 1000)),
    )
    if exception is not None:
        fields.update(
            error_type=_utf8(qualified_name(exception)),
            traceback=_utf8(format_traceback(exception)),
        )
    return fields


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates escaped (``str(error)`` may hold them)."""
    return text.encode("utf-8", "backslashreplace")


class DeadLetters:
    """Dead-letter operations for one stream."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        *,
        summary: LogSummary | None = None,
        keyring: Keyring | None = None,
        id_prefix: str = "",
    ) -> None:
        """``summary``: where the records of dead letters are summarised (a consumer's);
        ``keyring``: a replay re-encrypts with its current key what an older one encrypted;
        ``id_prefix``: what a Message ID of this stream starts with (``"2:"`` on a
        partitioned topic), for the IDs its records name."""
        self._client, self._id_prefix = client, id_prefix
        self._keyring = keyring
        self._stream = stream
        self.key = Keys(stream).dead_letters
        self._summary = summary or LogSummary()

    async def write(
        self,
        entry: RawEntry,
        *,
        group: str,
        consumer: str,
        error: str,
        exception: BaseException | None = None,
        bad_input: bool = False,
    ) -> None:
        """Dead-letter ``entry`` (it stays pending: the caller acknowledges it after this
        returns, so that a failed write leaves it to be redelivered).

        ``exception``: the failure, if it was one; its class and traceback are kept in the
        letter and logged. ``bad_input``: the entry itself is at fault (it cannot be
        decoded or fails its model), not the handler: logged on one line at WARNING, the
        traceback at DEBUG only.
        """
        fields = dead_letter_fields(
            entry, group=group, consumer=consumer, error=error, exception=exception
        )
        write = self._client.xadd(self.key, fields)
        await refused_if_wrong_type(write, self._client, "dead_letters", self.key, "stream",
                                    "no letter is written: the entries stay pending")  # fmt: skip
        self._log(entry, error, exception, bad_input)  # once written: a failure says so

    def _log(
        self, entry: RawEntry, error: str, exception: BaseException | None, bad_input: bool
    ) -> None:
        # A handler's own failure is an error worth its traceback; a Reject or bad input
        # is an expected outcome: one line at WARNING, the traceback at DEBUG (and in the
        # letter). The letter keeps the whole reason; the log a short one.
        failed = (
            exception is not None and not bad_input and not isinstance(exception, HandlerSignal)
        )
        self._summary.log(
            log, "dead letters with an error" if failed else "dead letters",
            logging.ERROR if failed else logging.WARNING,
            "dead-lettered %s (%s): %s", self._id_prefix + entry.id, entry.type, shortened(error),
            exc_info=exception if failed else None,
        )  # fmt: skip
        if bad_input and exception is not None and log.isEnabledFor(logging.DEBUG):
            log.debug("dead-lettered %s: the traceback", self._id_prefix + entry.id,
                      exc_info=exception)  # fmt: skip

    async def list(
        self, count: int = 100, start: str = "-", *, limit: int | None = None
    ) -> builtins.list[DeadLetter]:
        """The oldest ``count`` dead letters from ``start``.

        ``limit``: cut each field to its first ``limit`` bytes on the server (a letter's
        ``cut`` says which were cut and their full sizes), so that listing letters of any
        size takes a bounded amount of memory. A dead-letter key of another type than a
        stream is set aside (logged once): no letter is listed.
        """
        client, key = self._client, self.key
        if limit is not None:
            read = range_excerpts(client, key, start, "+", count, limit)
            excerpts = await unless_wrong_type(read, client, "dead_letters", key, "stream", [])
            return [DeadLetter.from_fields(e.id, e.fields, e.sizes) for e in excerpts]
        read_rows = client.xrange(key, start, "+", count)
        rows = await unless_wrong_type(read_rows, client, "dead_letters", key, "stream", [])
        return [DeadLetter.from_fields(entry_id, fields) for entry_id, fields in rows]

    async def count(self) -> int:
        return int(await self._client.xlen(self.key))

    async def exists(self) -> bool:
        return bool(await self._client.exists(self.key))

    async def replay(self, dead_letter_id: str) -> str:
        """Publish the dead letter again as a new entry and remove it; return the new ID.

        Raises MessageNotFoundError if there is no such letter (or it was just replayed).
        """
        StreamId.parse(dead_letter_id)
        rows = await self._client.xrange(self.key, min=dead_letter_id, max=dead_letter_id)
        new_id = await self._replay_rows(rows)
        if not new_id:
            raise MessageNotFoundError(f"no dead letter {dead_letter_id} in {self.key}")
        return new_id[0]

    async def replay_all(self) -> builtins.list[str]:
        """Replay the dead letters present now, in order, each once; return the new IDs.

        Letters added while it runs (e.g. a consumer failing again on the replayed
        entries) are left for the next replay.
        """
        last = await self._client.xrevrange(self.key, max="+", min="-", count=1)
        if not last:
            return []
        last_id, start = _text(last[0][0]), "-"
        new_ids: builtins.list[str] = []
        while True:
            rows = await self._client.xrange(self.key, min=start, max=last_id, count=REPLAY_PAGE)
            new_ids.extend(await self._replay_rows(rows))
            if len(rows) < REPLAY_PAGE:
                return new_ids
            start = "(" + _text(rows[-1][0])

    async def _replay_rows(self, rows: builtins.list[Any]) -> builtins.list[str]:
        """Replay these dead-letter rows in one round trip; the IDs of those published
        (a letter another replay removed first is skipped)."""
        if not rows:
            return []
        pipe = self._client.pipeline(transaction=False)
        for letter_id, fields in rows:
            message = _replayed_message(fields, self._id_prefix)
            if self._keyring is not None:
                # loaded on first use: only a replay with a keyring re-encrypts
                from ..payload.rotation import reencrypted

                message = reencrypted(message, self._keyring)
            args = [item for pair in message.items() for item in pair]
            pipe.eval(_REPLAY, 2, self.key, self._stream, letter_id, *args)
        replies = await pipe.execute()
        return [_text(new_id) for new_id in replies if new_id]

    async def purge(self, older_than_ms: int | None = None) -> int:
        """Delete dead letters (all, or those dead before ``older_than_ms``); return count."""
        if older_than_ms is None:
            removed = await self._client.xlen(self.key)
            await self._client.delete(self.key)
            return int(removed)
        return int(
            await self._client.xtrim(self.key, minid=f"{older_than_ms}-0", approximate=False)
        )


def _replayed_message(fields: dict[bytes, bytes], id_prefix: str) -> dict[bytes, bytes]:
    """The entry to publish again: every wire field of the letter (data null if missing),
    meta with a replay note naming the original entry as a Message ID of the topic
    (``id_prefix``: its partition's, as ``"2:"``)."""
    message = {k: v for k, v in fields.items() if k in WIRE_FIELDS}
    message.setdefault(b"data", b"null")
    original = id_prefix + _text(fields.get(b"original_id", b""))
    message[b"meta"] = _with_replay_note(fields.get(b"meta"), original)
    return message


def _with_replay_note(meta: bytes | None, original_id: str) -> bytes:
    import pydantic_core

    try:
        values = pydantic_core.from_json(meta) if meta else {}
        if not isinstance(values, dict):
            values = {}
    except ValueError:
        values = {}
    values["replayed_from"] = original_id
    return pydantic_core.to_json(values)
