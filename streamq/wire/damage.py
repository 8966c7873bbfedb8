"""Damaged records set aside: logged once each at ERROR, counted per kind.

The checked readers (:mod:`streamq.wire.records`) say what is damaged; the loops that read
the same record every turn (a heartbeat, a poll, a page refreshed) call :func:`set_aside`
each time, and only the first time logs. The counts are exported as the metric
``streamq_damaged_records`` (:mod:`streamq.metrics`), labelled by kind.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from .records import DamagedRecord

log = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000  # records remembered as logged; past this, they may log again

_lock = threading.Lock()
_logged: set[DamagedRecord] = set()
_counts: Counter[str] = Counter()


def set_aside(damaged: DamagedRecord, consequence: str = "set aside") -> None:
    """Log ``damaged`` (once per record) and count it; ``consequence`` says what streamq
    does instead of using it."""
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
