"""Reading a stream from Spark: batch ranges and micro-batches.

Offsets are entry IDs, ``{"id": "<ms>-<seq>"}``: the last ID a batch includes. A batch covers
``(start, end]``; a restarted query continues from the ID in its checkpoint. With a
``group`` option the source keeps a consumer group whose last-delivered ID is moved to each
committed end (``XGROUP SETID``), so ``XINFO GROUPS``/``topic_info()`` show the pipeline's
lag and cleanup never removes what the pipeline has not read. IDs are compared as integers.

A partitioned topic is read the same way, partition by partition: its offset holds one
such offset per partition (``{"0": {"id": ...}, "1": ...}``, see ``topic.py``), a batch is
``(start, end]`` in each partition (one Spark input partition per topic partition that has
new entries, more by ID range if option ``partitions`` asks), and the group is kept, and
moved, on every partition stream.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader

from .._ids import StreamId
from ..errors import ConfigError
from ..topic.partitions import recorded_partitions_sync
from ..wire.replies import text as _text
from .group import advance_group, ensure_group
from .offsets import (
    ZERO,
    RangePartition,
    StreamState,
    check_data_loss,
    offset,
    offset_index,
    parse_offset,
    split_range,
    stream_state,
)
from .options import ReadOptions
from .rows import read_range
from .topic import Offset, SparkTopic, TopicClients

try:  # pyspark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.0/4.1: no admission control API
    ReadAllAvailable = ReadLimit = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


log = logging.getLogger(__name__)


def ranges_per_partition(requested: int, topic: SparkTopic) -> int:
    """Spark input partitions per topic partition: one, or more if option ``partitions``
    asks for more input partitions than the topic has."""
    return max(1, -(-requested // len(topic.streams)))


def where(topic: SparkTopic, index: int) -> tuple[str | None, int | None, tuple[int, ...] | None]:
    """The stream, its index and its rows' trailing columns (partition, and level) that a
    range names (all None for a plain stream)."""
    if not topic.partitioned:
        return None, None, None
    return topic.streams[index], index, topic.columns_of(index)


def read_partition(opts: ReadOptions, partition: RangePartition) -> Iterator[Any]:
    return read_range(opts, partition.lo, partition.hi, partition.stream, partition.index,
                      partition.trailing)  # fmt: skip


class StreamqBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("streamq")``: entries between startingOffsets and endingOffsets
    (on a partitioned topic: in every partition, an entry ID being a point in time)."""

    def __init__(self, opts: ReadOptions, topic: SparkTopic | None = None) -> None:
        self.opts = opts
        self.topic = topic or SparkTopic(opts.stream, 1)

    def partitions(self) -> list[RangePartition]:
        clients = TopicClients(self.opts.url, self.topic)
        try:
            lasts = [stream_state(client, stream).last for client, stream in clients]
        finally:
            clients.close()
        per = ranges_per_partition(self.opts.partitions, self.topic)
        ranges: list[RangePartition] = []
        for index, last in enumerate(lasts):
            start = ZERO if self.opts.starting == "earliest" else (
                last if self.opts.starting == "latest" else StreamId.parse(self.opts.starting)
            )  # fmt: skip
            end = last if self.opts.ending == "latest" else StreamId.parse(self.opts.ending)
            ranges += split_range(start, end, per, *where(self.topic, index))
        return ranges or [RangePartition("0-0", "0-0")]

    def read(self, partition: RangePartition) -> Iterator[Any]:
        if partition.hi == "0-0":
            return iter(())
        return read_partition(self.opts, partition)


class StreamqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("streamq")``: micro-batches of new entries."""

    def __init__(self, opts: ReadOptions, topic: SparkTopic | None = None) -> None:
        self.opts = opts
        self.topic = topic or SparkTopic(opts.stream, 1)
        self._clients: TopicClients | None = None
        self._target: list[StreamId] | None = None  # Trigger.AvailableNow: never read past
        self._known_end: Offset | None = None  # pyspark 4.0/4.1: last planned end
        self._answered = False  # pyspark 4.0/4.1: latestOffset() has planned a batch
        self._group_at: list[StreamId | None] = [None] * len(self.topic.streams)

    @property
    def clients(self) -> TopicClients:
        if self._clients is None:
            self._clients = TopicClients(self.opts.url, self.topic)
        return self._clients

    def _states(self) -> list[StreamState]:
        states = [stream_state(client, stream) for client, stream in self.clients]
        if not self.topic.partitioned and states[0].length == 0:
            self._check_still_plain()
        return states

    def _check_still_plain(self) -> None:
        """A query started on a topic that did not exist yet reads it as a plain stream;
        if it has since been created partitioned, say so instead of reading nothing."""
        recorded = recorded_partitions_sync(self.clients.clients[0], self.topic.name)
        if recorded is not None:
            raise ConfigError(
                f"topic {self.topic.name!r} is now partitioned ({recorded} partitions) but "
                "this query reads it as a plain stream (it did not exist when the query "
                f"started): restart it with option('topicPartitions', {recorded}) and a new "
                "checkpointLocation"
            )

    def initialOffset(self) -> Offset:
        states = self._states()
        initial = self.topic.encode(
            [
                self._initial_offset(c, s, st)
                for (c, s), st in zip(self.clients, states, strict=True)
            ]
        )
        self._known_end = initial  # pyspark 4.0/4.1: the start of this run's first batch
        return initial

    def _initial_offset(self, client: Any, stream: str, state: StreamState) -> Offset:
        if self.opts.group:
            return ensure_group(client, stream, self.opts.group, self.opts.starting)
        if self.opts.starting == "latest":
            return offset(state.last, state.added)
        if self.opts.starting == "earliest":
            # what was removed before the query began is not a loss for it
            return offset(state.max_deleted or ZERO, state.added - state.length)
        return offset(StreamId.parse(self.opts.starting))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = [state.last for state in self._states()]

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_records_per_batch and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_records_per_batch)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: Offset | None = None, limit: Any = None) -> Offset:
        """Up to ``limit`` entries after ``start``, never past the AvailableNow target.

        pyspark 4.0/4.1 call this without arguments: then the limit is applied from the end
        last planned, or from the initial offset; a restarted query's first batch is not
        limited there (its start is only in the checkpoint: the batch Spark plans again
        at a restart was not planned by this reader), nor are AvailableNow runs (their
        first call is their target: all that is available).
        """
        if start is not None:
            # Spark asks for the next end only once the batch ending at `start` is in its
            # commit log (also after a restart's replay), and once more after the last batch
            # of an AvailableNow run, which commit() would never hear of.
            self._advance_group(start)
        states = self._states()
        lasts = [self._reachable(index, state) for index, state in enumerate(states)]
        if start is None and self._known_end is not None:
            # pyspark 4.0/4.1: Spark asks again only after the batch it planned last has
            # finished, so that batch's end is durable
            start = self._known_end
            self._advance_group(start)
        self._answered = True
        if start is None:
            return self.topic.encode([offset(last, added) for last, added in lasts])
        starts = self.topic.decode(start)
        begins = [parse_offset(s) for s in starts]
        if all(last <= begin for (last, _), begin in zip(lasts, begins, strict=True)):
            return dict(start)
        max_rows = self._max_rows(limit)
        if max_rows is None:
            return self.topic.encode(
                [
                    offset(last, added) if last > begin else dict(s or offset(ZERO))
                    for (last, added), begin, s in zip(lasts, begins, starts, strict=True)
                ]
            )
        return self._limited(starts, begins, lasts, states, max_rows) or dict(start)

    def _reachable(self, index: int, state: StreamState) -> tuple[StreamId, int | None]:
        """The last entry of a partition this run may read, and the entries added up to it
        (None if unknown)."""
        if self._target is not None and self._target[index] < state.last:
            return self._target[index], None
        return state.last, state.added

    def _limited(
        self,
        starts: Sequence[Mapping[str, Any] | None],
        begins: list[StreamId],
        lasts: list[tuple[StreamId, int | None]],
        states: list[StreamState],
        max_rows: int,
    ) -> Offset | None:
        """The end of a batch of at most ``max_rows`` entries, the oldest first over all
        partitions (None: nothing new)."""
        found: list[tuple[StreamId, int]] = []
        for index, ((client, stream), begin, (last, _)) in enumerate(
            zip(self.clients, begins, lasts, strict=True)
        ):
            if last > begin:
                rows = client.xrange(stream, min=f"({begin}", max=str(last), count=max_rows)
                found += [(StreamId.parse(_text(row[0])), index) for row in rows]
        taken = sorted(found)[:max_rows]
        if not taken:
            return None
        counts = Counter(index for _, index in taken)
        ends = {index: entry_id for entry_id, index in taken}  # ascending: the last wins
        result: list[Mapping[str, Any]] = []
        for index, start in enumerate(starts):
            if index not in ends:
                result.append(dict(start or offset(ZERO)))
            elif ends[index] == states[index].last:
                result.append(offset(ends[index], states[index].added))
            else:
                known = offset_index(start)
                added = known + counts[index] if known is not None else None
                result.append(offset(ends[index], added))
        return self.topic.encode(result)

    def _max_rows(self, limit: Any) -> int | None:
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if limit is None:  # old API: apply the option ourselves
            return self.opts.max_records_per_batch
        return None  # ReadAllAvailable

    def reportLatestOffset(self) -> Offset:
        return self.topic.encode([offset(st.last, st.added) for st in self._states()])

    def partitions(self, start: Offset, end: Offset) -> list[RangePartition]:
        self._advance_group(start)  # a batch starts where the last committed one ended
        starts, ends = self.topic.decode(start), self.topic.decode(end)
        # pyspark 4.0/4.1 restart a query by planning its checkpoint's last batch again
        # before asking latestOffset(), whose first answer is the run's AvailableNow target:
        # only the batches this reader planned set where the next one starts
        planned = self._answered or self._known_end is not None
        if planned and (
            self._known_end is None or _ahead(ends, self.topic.decode(self._known_end))
        ):
            self._known_end = dict(end)
        per = ranges_per_partition(self.opts.partitions, self.topic)
        ranges: list[RangePartition] = []
        for index, ((client, stream), first, last) in enumerate(
            zip(self.clients, starts, ends, strict=True)
        ):
            begin, finish = parse_offset(first), parse_offset(last)
            if finish > begin:
                check_data_loss(client, self.opts, first, stream)
                ranges += split_range(begin, finish, per, *where(self.topic, index))
        return ranges

    def read(self, partition: RangePartition) -> Iterator[Any]:
        return read_partition(self.opts, partition)

    def commit(self, end: Offset) -> None:
        self._advance_group(end)

    def _advance_group(self, processed: Mapping[str, Any]) -> None:
        """Move the pipeline's group, on each partition, to ``processed`` (forward only),
        so that cleanup and ``XINFO GROUPS`` see what the pipeline has durably read."""
        if not self.opts.group:
            return
        for index, ((client, stream), done) in enumerate(
            zip(self.clients, self.topic.decode(processed), strict=True)
        ):
            finish = parse_offset(done)
            at = self._group_at[index]
            if at is None or finish > at:
                advance_group(client, stream, self.opts.group, finish)
                self._group_at[index] = finish

    def stop(self) -> None:
        if self._clients is not None:
            self._clients.close()
            self._clients = None


def _ahead(
    ends: Sequence[Mapping[str, Any] | None], known: Sequence[Mapping[str, Any] | None]
) -> bool:
    """Whether a planned end goes past the known one in some partition."""
    return any(parse_offset(e) > parse_offset(k) for e, k in zip(ends, known, strict=True))
