"""Damaged records set aside: logged once each at ERROR, counted per kind.

The checked readers (:mod:`streamq.wire.records`) say what is damaged; the loops that read
the same record every turn (a heartbeat, a poll, a page refreshed) call :func:`set_aside`
each time, and only the first time logs. The counts are exported as the metric
``streamq_damaged_records`` (:mod:`streamq.metrics`), labelled by kind. A listing that
names the damage beside its figures (``topic_info().damaged``, a dashboard page) reads
within :func:`noting`, which sees every record set aside there, logged before or not.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .records import DamagedRecord

log = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000  # records remembered as logged; past this, they may log again

_lock = threading.Lock()
_logged: set[DamagedRecord] = set()
_counts: Counter[str] = Counter()
_noted: ContextVar[list[DamagedRecord] | None] = ContextVar("streamq_noted", default=None)


def set_aside(damaged: DamagedRecord, consequence: str = "set aside") -> None:
    """Log ``damaged`` (once per record) and count it; ``consequence`` says what streamq
    does instead of using it."""
    noted = _noted.get()
    if noted is not None and damaged not in noted:
        noted.append(damaged)
    with _lock:
        first = damaged not in _logged
        if first:
            if len(_logged) >= MAX_REMEMBERED:
                _logged.clear()
            _logged.add(damaged)
            _counts[damaged.kind] += 1
    if first:
        log.error("%s: %s", damaged, consequence)


def damaged_counts() -> dict[str, int]:
    """Damaged records found by this process so far, per kind (each record once)."""
    with _lock:
        return dict(_counts)


@contextmanager
def noting() -> Iterator[list[DamagedRecord]]:
    """The records set aside within the block (each once, in the order met); those of a
    block within another are the outer one's too (a page's, of each of its topics)."""
    outer = _noted.get()
    found: list[DamagedRecord] = []
    token = _noted.set(found)
    try:
        yield found
    finally:
        _noted.reset(token)
        if outer is not None:
            outer.extend(record for record in found if record not in outer)
