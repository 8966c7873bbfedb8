"""A batch's log context (:data:`streamq.logs.ENTRY`), set and reset around it (a single
entry's is set by the worker that runs it, :meth:`~.consumer.Consumer.process`).

Kept apart from dispatch so that handling decides outcomes and this module only says which
entry a record is about. Trace spans are a handler middleware (:mod:`.traced`).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..logs import ENTRY

if TYPE_CHECKING:
    from ..message import RawEntry

Work = Coroutine[Any, Any, None]


class Observer:
    """Log context of one consumer's batches."""

    async def batch(self, work: Work, entries: list[RawEntry], type_name: str) -> None:
        """Await ``work``, the handling of a batch, in its log context."""
        delivery = max(entry.delivery_count for entry in entries)
        token = ENTRY.set(([e.id for e in entries], type_name, delivery))
        try:
            await work
        finally:
            ENTRY.reset(token)
