"""Samples of a topic over time, for the topic page's live chart.

The page polls a small fragment every couple of seconds; each poll may take a sample (at
most one per :data:`MIN_INTERVAL` per topic, however many pages watch it) into a ring of
the last :data:`RING_SIZE` samples kept in this process. So the chart covers the minutes
since someone first opened the topic, and is empty again after a restart: it is a view of
now, not a metrics store (Prometheus is, see :mod:`streamq.metrics`).

A sample is two commands per stream: XINFO STREAM (in a script that leaves out the first
and last entries' values; ``entries-added``: what was ever published) and XINFO GROUPS
(each group's lag, pending count and ``entries-read``); a partitioned topic's sample is
the sum over its partitions. Rates come from the difference between consecutive samples,
so a gap in polling shows as an average, not a spike.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import redis.asyncio as aioredis

from ..errors import StreamNotFoundError
from ..wire import replies
from ..wire.excerpts import stream_summary
from .view import TopicView

MIN_INTERVAL = 1.0
RING_SIZE = 300  # ten minutes at one sample every two seconds
MAX_TOPICS = 100  # rings kept; the least recently watched topic is forgotten first


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # Unix time, seconds
    lag: int | None  # all groups together; None if a group's lag is unknown
    pending: int
    added: int | None  # entries ever added to the stream (Redis >= 7)
    read: int | None  # entries read by all groups together (Redis >= 7)


async def take_sample(client: aioredis.Redis, stream: str) -> Sample | None:
    """A sample of ``stream`` now; None if the stream does not exist."""
    try:
        info = await stream_summary(client, stream)  # not the entries' values
        groups = replies.groups(await client.xinfo_groups(stream))
    except StreamNotFoundError:
        return None
    added = info.entries_added
    lags = [g.lag for g in groups]
    reads = [_entries_read(g, added) for g in groups]
    return Sample(
        at=time.time(),
        lag=_sum_known(lags),
        pending=sum(g.pending for g in groups),
        added=added,
        read=_sum_known(reads),
    )


async def sample_topic(view: TopicView) -> Sample | None:
    """A sample of the topic now (summed over its partitions); None if no stream of it
    exists."""
    samples = []
    for index in range(view.partitions):
        stream, client = view.part(index)
        sample = await take_sample(client, stream)
        if sample is not None:
            samples.append(sample)
    return summed(samples) if samples else None


def summed(samples: Sequence[Sample]) -> Sample:
    """Samples of a topic's partitions as one (a figure unknown in one is unknown)."""
    return Sample(
        at=max(s.at for s in samples),
        lag=_sum_known([s.lag for s in samples]),
        pending=sum(s.pending for s in samples),
        added=_sum_known([s.added for s in samples]),
        read=_sum_known([s.read for s in samples]),
    )


def _sum_known(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def _entries_read(group: replies.Group, added: int | None) -> int | None:
    """A group's ``entries-read``; the server leaves it null for a group that has read
    nothing since it was created at an ID, but then lag = added - read gives it."""
    read, lag = group.entries_read, group.lag
    if read is None and lag is not None and added is not None:
        return added - lag
    return read


class SampleStore:
    """The rings of samples of the topics watched lately, one per topic."""

    def __init__(
        self,
        ring_size: int = RING_SIZE,
        max_topics: int = MAX_TOPICS,
        min_interval: float = MIN_INTERVAL,
    ) -> None:
        self._rings: OrderedDict[str, deque[Sample]] = OrderedDict()
        self._ring_size, self._max_topics = ring_size, max_topics
        self.min_interval = min_interval
        self._lock = anyio.Lock()

    async def refresh(self, view: TopicView) -> list[Sample]:
        """Take a sample unless the last one is fresh; return the topic's samples."""
        async with self._lock:  # two pages polling at once add one sample, in order
            ring = self._ring(view.stream)
            if not ring or time.time() - ring[-1].at >= self.min_interval:
                sample = await sample_topic(view)
                if sample is not None:
                    ring.append(sample)
            return list(ring)

    def _ring(self, stream: str) -> deque[Sample]:
        ring = self._rings.get(stream)
        if ring is None:
            ring = self._rings[stream] = deque(maxlen=self._ring_size)
            while len(self._rings) > self._max_topics:
                self._rings.popitem(last=False)
        self._rings.move_to_end(stream)
        return ring

    def forget(self, stream: str) -> None:
        """Drop a topic's samples (it was terminated)."""
        self._rings.pop(stream, None)


def chart_series(samples: list[Sample]) -> dict[str, list[float | None]]:
    """Columns for the chart: time, lag, pending, published/s and read/s (null where
    unknown; the rates are null at the first sample)."""
    series: dict[str, list[float | None]] = {
        "t": [], "lag": [], "pending": [], "published": [], "read": [],
    }  # fmt: skip
    previous: Sample | None = None
    for sample in samples:
        series["t"].append(round(sample.at, 3))
        series["lag"].append(sample.lag)
        series["pending"].append(sample.pending)
        if previous is None:
            series["published"].append(None)
            series["read"].append(None)
        else:
            elapsed = sample.at - previous.at
            series["published"].append(_rate(previous.added, sample.added, elapsed))
            series["read"].append(_rate(previous.read, sample.read, elapsed))
        previous = sample
    return series


def _rate(before: int | None, now: int | None, elapsed: float) -> float | None:
    if before is None or now is None or elapsed <= 0 or now < before:
        return None  # unknown, or the stream was deleted and made again in between
    return round((now - before) / elapsed, 2)
