"""Stream entry IDs as (ms, seq) integers. Never compare IDs as strings."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import NamedTuple

from .errors import InvalidMessageIdError

MAX_SEQ = 2**64 - 1
# int() also takes signs, spaces, underscores and non-ASCII digits (full-width, Arabic-Indic):
# match first.
_ID = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_MAX_DIGITS = len(str(MAX_SEQ))
_SHAPE = "expected '<milliseconds>-<sequence>' in ASCII digits"


def _invalid(value: object, why: str) -> InvalidMessageIdError:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return InvalidMessageIdError(f"invalid stream entry ID {value!r}: {why}")


class StreamId(NamedTuple):
    """A parsed entry ID; orders like Redis does."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, value: str | bytes | StreamId) -> StreamId:
        """Parse ``"<ms>-<seq>"`` (or ``"<ms>"``, seq 0): ASCII digits only, each part at
        most 2**64-1. Raise InvalidMessageIdError for anything else (never a decoding or
        type error)."""
        if isinstance(value, StreamId):
            return value
        if isinstance(value, bytes):
            text = value.decode("ascii", "replace")  # U+FFFD never matches
        elif isinstance(value, str):
            text = value
        else:
            raise _invalid(value, f"must be a string, not {type(value).__name__}")
        match = _ID.fullmatch(text)
        if match is None:
            raise _invalid(value, _SHAPE)
        ms_text, seq_text = match[1].lstrip("0"), (match[2] or "").lstrip("0")
        # Length first: int() refuses strings of over 4300 digits with a ValueError.
        if max(len(ms_text), len(seq_text)) > _MAX_DIGITS:
            raise _invalid(value, "out of range (each part at most 2**64-1)")
        ms, seq = int(ms_text or 0), int(seq_text or 0)
        if ms > MAX_SEQ or seq > MAX_SEQ:
            raise _invalid(value, "out of range (each part at most 2**64-1)")
        return cls(ms, seq)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def next(self) -> StreamId:
        """The smallest ID greater than this one."""
        if self.seq == MAX_SEQ:
            return StreamId(self.ms + 1, 0)
        return StreamId(self.ms, self.seq + 1)

    @property
    def timestamp(self) -> datetime:
        """When the entry was added (the ms part), in UTC."""
        return datetime.fromtimestamp(self.ms / 1000, tz=UTC)


def after(entry_id: StreamId) -> str:
    """The smallest entry ID greater than ``entry_id`` (a claim's start is inclusive)."""
    return f"{entry_id.ms}-{entry_id.seq + 1}"
