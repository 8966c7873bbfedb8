"""The entries of a key that its lane did not keep in memory (past the key's share of the
budget, or behind an entry its key waits on: see :mod:`.ordering`), brought back in ID
order from this owner's pending list once the lane has run what it holds.

The read put them in the pending list, and a takeover claimed them there; an entry leaves
it only when it is acked (once handled) or set aside by a stop, and entries of a key behind
the one a lane stopped at are never handled before it. So a spilled entry is found again
among this consumer's pending entries of the partition, between the first one spilled and
the last entry given to the lanes, with the delivery count the read or the takeover gave
it: a spilled entry only waited, and no delivery is counted for that. One fenced script
call (``refill``) looks through up to a page of pending IDs and returns only the key's
entries, so a refill costs one round trip however many other keys are pending.

An entry a stop took out of the pending list (stopped while spilled, or set aside before
this owner took the partition) comes back with them, from the stopped hash, named as
stopped so that its lane holds it there (its key waits until it is resumed); one resumed
meanwhile is claimed back from the resume's claimer, its delivery counted.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .._ids import StreamId, after
from ..message import RawEntry
from ..topic.control import RESUME_CLAIMER
from ..wire import replies
from ..wire.replies import text
from .failures import describe
from .ordering import LaneKey

log = logging.getLogger(__name__)

# pending IDs one refill call looks at, at most: a bound on the script's time when many
# entries of other keys are pending between two of this key's
PAGE = 1000

Fenced = Callable[..., Awaitable[list[Any]]]


class PendingRefill:
    """``refill`` of :class:`~streamq.consume.ordering.KeyedLanes` for one owned partition.

    ``fenced(op, *args)`` runs a fenced op (the lease checked); ``last_given()`` is the
    highest entry ID given to the lanes so far (nothing past it was spilled). An error gives
    the partition up (``give_up``), as one outside a handler does: the next owner takes
    every pending entry over, so nothing is skipped."""

    def __init__(
        self, fenced: Fenced, last_given: Callable[[], StreamId], give_up: Callable[[], None],
        stream: str, stopped: Callable[[list[str]], None],
    ) -> None:  # fmt: skip
        """``stopped(ids)``: of the entries given back, those a stop holds."""
        self._fenced, self._last_given, self._give_up = fenced, last_given, give_up
        self._stream, self._stopped = stream, stopped

    async def __call__(
        self, key: LaneKey, start: str, want: int
    ) -> tuple[list[RawEntry], str | None]:
        try:
            return await self._refill(key, start, want)
        except Exception as e:
            log.error("partition %s: giving it up after an error refilling a lane: %s",
                      self._stream, describe(e), exc_info=e)  # fmt: skip
            self._give_up()
            await anyio.sleep_forever()  # cancelled by give_up()
            raise

    async def _refill(
        self, key: LaneKey, start: str, want: int
    ) -> tuple[list[RawEntry], str | None]:
        upto = self._last_given()
        keyless = key is None
        reply = await self._fenced(
            "refill", start, str(upto), want, PAGE, b"" if key is None else key, int(keyless),
            RESUME_CLAIMER,
        )  # fmt: skip
        entries = [_entry(row) for row in reply[1]]
        if reply[4]:
            self._stopped([text(entry_id) for entry_id in reply[4]])
        complete = int(reply[3]) == 1
        bound = upto if complete else StreamId.parse(text(reply[2]))
        log.debug("partition %s: %d entries of key %r back from the pending list",
                  self._stream, len(entries), key)  # fmt: skip
        return entries, None if complete else after(bound)


def _entry(row: list[Any]) -> RawEntry:
    (entry,) = replies.entries([[row[0], row[1]]])
    entry.delivery_count = max(1, int(row[2]))
    return entry
