"""In-process counters and histograms of one consumer (``mq.stats()``), kept cheap enough
for the hot path: integer increments and one bisect per observation."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def snapshot(self) -> dict[str, Any]:
        """Cumulative buckets, Prometheus style."""
        cumulative, running = [], 0
        for bound, n in zip([*self.bounds, float("inf")], self.counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return {"buckets": cumulative, "sum": self.total, "count": self.count}


def merged_snapshots(one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Two snapshots of histograms with the same buckets (:meth:`Histogram.snapshot`) as
    one: each bucket's counts, the sums and the counts added."""
    buckets = [
        (bound, n + m) for (bound, n), (_, m) in zip(one["buckets"], other["buckets"], strict=True)
    ]
    return {
        "buckets": buckets,
        "sum": one["sum"] + other["sum"],
        "count": one["count"] + other["count"],
    }


@dataclass
class Stats:
    received: int = 0
    handled: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    skipped: int = 0  # fan-out: entries of a type without a handler here (a group: none)
    handler_seconds: Histogram = field(default_factory=lambda: Histogram(SECONDS_BUCKETS))
    batch_size: Histogram = field(default_factory=lambda: Histogram(SIZE_BUCKETS))
    scheduled_moved: int = 0  # scheduled messages this consumer added to its stream
    forwarded: int = 0  # outputs this consumer forwarded from an outbox to their target
    # seconds after its due time each was added (streamq.consume.mover)
    scheduled_lateness: Histogram = field(default_factory=lambda: Histogram(SECONDS_BUCKETS))

    # "claimed" and "acked" are counted by the Claimer and the Acker that do the work
    COUNTERS = (
        "received", "handled", "failed", "retried", "dead_lettered", "skipped", "scheduled_moved",
        "forwarded",
    )  # fmt: skip

    def report(self, *, claimed: int, acked: int, in_flight: int) -> dict[str, Any]:
        """``mq.stats()`` of one consumer: the counters, ``claimed`` and ``acked`` (counted
        by the parts that do the work), the ``in_flight`` gauge and the histograms."""
        report: dict[str, Any] = {name: getattr(self, name) for name in self.COUNTERS}
        report.update(
            claimed=claimed, acked=acked, in_flight=in_flight,
            handler_seconds=self.handler_seconds.snapshot(),
            batch_size=self.batch_size.snapshot(),
            scheduled_lateness_seconds=self.scheduled_lateness.snapshot(),
        )  # fmt: skip
        return report
