"""The dead-letter stream ``streamq:{<stream>}:dlq``: write, list, replay, purge.

A dead letter keeps the original ID, type, raw data and meta, the group and consumer that
gave up, the error text and the number of deliveries. Writing is XADD to the dead-letter
stream *then* XACK of the original, in one pipeline in that order: a crash between the two
leaves the entry pending (so it is dead-lettered twice at worst), never lost.
"""

from __future__ import annotations

import builtins
import logging
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from ._redis import text, translated
from .errors import MessageNotFoundError
from .ids import StreamId
from .keys import Keys
from .message import RawEntry

log = logging.getLogger(__name__)

_COPIED_FIELDS = (b"type", b"data", b"meta")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of the dead-letter stream."""

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

    @classmethod
    def from_fields(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
        def field(name: bytes) -> str | None:
            raw = fields.get(name)
            return raw.decode("utf-8", "replace") if raw is not None else None

        return cls(
            id=text(entry_id),
            original_id=field(b"original_id") or "",
            type=field(b"type"),
            data=field(b"data"),
            meta=field(b"meta"),
            group=field(b"group") or "",
            consumer=field(b"consumer") or "",
            error=field(b"error") or "",
            attempts=int(field(b"attempts") or 0),
            dead_at_ms=int(field(b"dead_at_ms") or 0),
        )


def dead_letter_fields(
    entry: RawEntry, *, group: str, consumer: str, error: str
) -> dict[bytes | str, bytes | str]:
    fields: dict[bytes | str, bytes | str] = {
        name: entry.fields[name] for name in _COPIED_FIELDS if name in entry.fields
    }
    extra = sorted(k.decode("utf-8", "replace") for k in entry.fields if k not in _COPIED_FIELDS)
    if extra:
        error = f"{error} (other fields not kept: {', '.join(extra)})"
    fields.update(
        original_id=entry.id,
        group=group,
        consumer=consumer,
        error=error[:4000],
        attempts=str(entry.delivery_count),
        dead_at_ms=str(int(time.time() * 1000)),
    )
    return fields


class DeadLetters:
    """Dead-letter operations for one stream."""

    def __init__(self, client: aioredis.Redis, stream: str) -> None:
        self._client = client
        self._stream = stream
        self.key = Keys(stream).dead_letters

    async def write(self, entry: RawEntry, *, group: str, consumer: str, error: str) -> None:
        """Dead-letter ``entry`` and acknowledge it, in that order, in one round trip."""
        log.warning(
            "dead-lettering %s (type %r, %d deliveries): %s",
            entry.id, entry.type, entry.delivery_count, error,
        )  # fmt: skip
        fields = dead_letter_fields(entry, group=group, consumer=consumer, error=error)
        pipe = self._client.pipeline(transaction=False)
        pipe.xadd(self.key, fields)
        pipe.xack(self._stream, group, entry.id)
        with translated(self._stream, group):
            await pipe.execute()

    async def list(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """The oldest ``count`` dead letters from ``start``."""
        with translated(self.key):
            rows = await self._client.xrange(self.key, min=start, max="+", count=count)
        return [DeadLetter.from_fields(entry_id, fields) for entry_id, fields in rows]

    async def count(self) -> int:
        with translated(self.key):
            return int(await self._client.xlen(self.key))

    async def replay(self, dead_letter_id: str) -> str:
        """Publish the dead letter again as a new entry and remove it; return the new ID."""
        StreamId.parse(dead_letter_id)
        with translated(self.key):
            rows = await self._client.xrange(self.key, min=dead_letter_id, max=dead_letter_id)
        if not rows:
            raise MessageNotFoundError(f"no dead letter {dead_letter_id} in {self.key}")
        _, fields = rows[0]
        message = {k: v for k, v in fields.items() if k in _COPIED_FIELDS}
        original = fields.get(b"original_id", b"").decode()
        meta = fields.get(b"meta")
        message.setdefault(b"data", b"null")
        message[b"meta"] = _with_replay_note(meta, original)
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(self._stream, message)
        pipe.xdel(self.key, dead_letter_id)
        with translated(self._stream):
            new_id, _ = await pipe.execute()
        return str(new_id.decode())

    async def replay_all(self) -> builtins.list[str]:
        """Replay every dead letter in order; return the new IDs."""
        new_ids: builtins.list[str] = []
        while letters := await self.list(count=500):
            new_ids.extend([await self.replay(letter.id) for letter in letters])
        return new_ids

    async def purge(self, older_than_ms: int | None = None) -> int:
        """Delete dead letters (all, or those dead before ``older_than_ms``); return count."""
        with translated(self.key):
            if older_than_ms is None:
                removed = await self._client.xlen(self.key)
                await self._client.delete(self.key)
                return int(removed)
            return int(
                await self._client.xtrim(self.key, minid=f"{older_than_ms}-0", approximate=False)
            )


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
