"""Stream entry IDs as (ms, seq) integers. Never compare IDs as strings."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from .errors import InvalidMessageIdError

MAX_SEQ = 2**64 - 1


class StreamId(NamedTuple):
    """A parsed entry ID; orders like Redis does."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, value: str | bytes | StreamId) -> StreamId:
        """Parse ``"<ms>-<seq>"`` (or ``"<ms>"``, seq 0); raise InvalidMessageIdError."""
        if isinstance(value, StreamId):
            return value
        text = value.decode() if isinstance(value, bytes) else str(value)
        ms_part, sep, seq_part = text.partition("-")
        try:
            ms, seq = int(ms_part), int(seq_part) if sep else 0
        except ValueError:
            raise InvalidMessageIdError(
                f"invalid stream entry ID {text!r}: expected '<milliseconds>-<sequence>'"
            ) from None
        if ms < 0 or seq < 0 or seq > MAX_SEQ or not ms_part.isdigit():
            raise InvalidMessageIdError(f"invalid stream entry ID {text!r}: out of range")
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


def id_from_time(when: datetime) -> StreamId:
    """The first ID at or after ``when``."""
    return StreamId(int(when.timestamp() * 1000), 0)
