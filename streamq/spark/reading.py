"""Reading a stream from Spark: batch ranges and micro-batches.

Offsets are entry IDs, ``{"id": "<ms>-<seq>"}``: the last ID a batch includes. A batch covers
``(start, end]``; a restarted query continues from the ID in its checkpoint. With a
``group`` option the source keeps a consumer group whose last-delivered ID is moved to each
committed end (``XGROUP SETID``), so ``XINFO GROUPS``/``topic_info()`` show the pipeline's
lag and cleanup never removes what the pipeline has not read. IDs are compared as integers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, cast

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader

from ..errors import DataLossError
from ..ids import StreamId
from ..wire.client import text as _text
from .offsets import (
    ZERO,
    RangePartition,
    StreamState,
    check_data_loss,
    connect,
    offset,
    offset_index,
    parse_offset,
    split_range,
    stream_state,
)
from .options import ReadOptions
from .rows import read_range

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

LAG_SCAN = 10_000


class StreamqBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("streamq")``: entries between startingOffsets and endingOffsets."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        client = connect(self.opts.url, self.opts.stream)
        try:
            last = stream_state(client, self.opts.stream).last
        finally:
            client.close()
        start = ZERO if self.opts.starting == "earliest" else (
            last if self.opts.starting == "latest" else StreamId.parse(self.opts.starting)
        )  # fmt: skip
        end = last if self.opts.ending == "latest" else StreamId.parse(self.opts.ending)
        return split_range(start, end, self.opts.partitions) or [RangePartition("0-0", "0-0")]

    def read(self, partition: RangePartition) -> Iterator[Any]:
        if partition.hi == "0-0":
            return iter(())
        return read_range(self.opts, partition.lo, partition.hi)


class StreamqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("streamq")``: micro-batches of new entries."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: Any = None
        self._target: StreamId | None = None  # Trigger.AvailableNow: never read past this
        self._known_end: dict[str, Any] | None = None  # pyspark 4.0/4.1: last planned end
        self._group_at: StreamId | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.opts.url, self.opts.stream)
        return self._client

    def initialOffset(self) -> dict[str, Any]:
        initial = self._initial_offset()
        self._known_end = initial  # pyspark 4.0/4.1: the start of this run's first batch
        return initial

    def _initial_offset(self) -> dict[str, Any]:
        state = stream_state(self.client, self.opts.stream)
        if self.opts.group:
            return self._ensure_group(state)
        if self.opts.starting == "latest":
            return offset(state.last, state.added)
        if self.opts.starting == "earliest":
            # what was removed before the query began is not a loss for it
            return offset(state.max_deleted or ZERO, state.added - state.length)
        return offset(StreamId.parse(self.opts.starting))

    def _ensure_group(self, state: StreamState) -> dict[str, Any]:
        """Create the pipeline's group at the starting position; an existing group's
        position wins (the checkpoint, when there is one, wins over both)."""
        import redis

        start = {"latest": "$", "earliest": "0"}.get(self.opts.starting, self.opts.starting)
        try:
            self.client.xgroup_create(self.opts.stream, self.opts.group, id=start, mkstream=True)
        except redis.ResponseError as e:
            if not str(e).startswith("BUSYGROUP"):
                raise
        for group in self.client.xinfo_groups(self.opts.stream):
            if _text(group["name"]) == self.opts.group:
                read = group.get("entries-read")
                position = StreamId.parse(_text(group["last-delivered-id"]))
                return offset(position, int(read) if read is not None else None)
        raise DataLossError(f"group {self.opts.group!r} vanished while the query started")

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = stream_state(self.client, self.opts.stream).last

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_records_per_batch and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_records_per_batch)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """Up to ``limit`` entries after ``start``, never past the AvailableNow target.

        pyspark 4.0/4.1 call this without arguments: then the limit is applied from the end
        last planned, or from the initial offset; a restarted query's first batch is not
        limited there (its start is only in the checkpoint), nor are AvailableNow runs.
        """
        if start is not None:
            # Spark asks for the next end only once the batch ending at `start` is in its
            # commit log (also after a restart's replay), and once more after the last batch
            # of an AvailableNow run, which commit() would never hear of.
            self._advance_group(start)
        state = stream_state(self.client, self.opts.stream)
        last, added = state.last, cast("int | None", state.added)
        if self._target is not None and self._target < last:
            last, added = self._target, None
        if start is None and self._known_end is not None:
            # pyspark 4.0/4.1: Spark asks again only after the batch it planned last has
            # finished, so that batch's end is durable
            start = self._known_end
            self._advance_group(start)
        begin = parse_offset(start) if start is not None else None
        if begin is not None and last <= begin:
            return dict(start)  # type: ignore[arg-type]
        max_rows = self._max_rows(limit)
        if begin is None or max_rows is None:
            return offset(last, added)
        rows = self.client.xrange(self.opts.stream, min=f"({begin}", max=str(last), count=max_rows)
        if not rows:
            return dict(start)  # type: ignore[arg-type]
        index = offset_index(start)
        end = StreamId.parse(_text(rows[-1][0]))
        if end == state.last:
            return offset(end, state.added)
        return offset(end, index + len(rows) if index is not None else None)

    def _max_rows(self, limit: Any) -> int | None:
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if limit is None:  # old API: apply the option ourselves
            return self.opts.max_records_per_batch
        return None  # ReadAllAvailable

    def reportLatestOffset(self) -> dict[str, Any]:
        state = stream_state(self.client, self.opts.stream)
        return offset(state.last, state.added)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, finish = parse_offset(start), parse_offset(end)
        self._advance_group(start)  # a batch starts where the last committed one ended
        if self._known_end is None or finish > parse_offset(self._known_end):
            self._known_end = dict(end)
        if finish <= begin:
            return []
        check_data_loss(self.client, self.opts, start)
        return split_range(begin, finish, self.opts.partitions)

    def read(self, partition: RangePartition) -> Iterator[Any]:
        return read_range(self.opts, partition.lo, partition.hi)

    def commit(self, end: dict[str, Any]) -> None:
        self._advance_group(end)

    def _advance_group(self, processed: Mapping[str, Any]) -> None:
        """Move the pipeline's group to ``processed`` (forward only), so that cleanup and
        ``XINFO GROUPS`` see what the pipeline has durably read."""
        finish = parse_offset(processed)
        if not self.opts.group or (self._group_at is not None and finish <= self._group_at):
            return
        command: list[Any] = ["XGROUP", "SETID", self.opts.stream, self.opts.group, str(finish)]
        after = self.client.xrange(self.opts.stream, min=f"({finish}", max="+", count=LAG_SCAN)
        if len(after) < LAG_SCAN:
            # ENTRIESREAD keeps XINFO GROUPS' lag exact (= entries after the committed end);
            # with a larger backlog Redis reports the lag as unknown instead.
            added = int(self.client.xinfo_stream(self.opts.stream)["entries-added"])
            command += ["ENTRIESREAD", max(added - len(after), 0)]
        self.client.execute_command(*command)
        self._group_at = finish

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
