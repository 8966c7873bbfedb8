"""Which stream of a topic each written row goes to: its partition, and on a topic with
priorities its level (:mod:`.levels`), the stream at index ``level * partitions +
partition`` of :attr:`SparkTopic.streams <streamq.spark.topic.SparkTopic.streams>`.

With option ``keyColumn``, a row goes to the partition of its key, by the same hash as
``publish(key=...)`` (CRC32 of the key's UTF-8 bytes, modulo the partition count:
:func:`~streamq.topic.partitions.partition_for_key`), so Spark and the services agree on
where a customer's messages are, and rows of one key written by one Spark task keep their
order. Without it, rows take the partitions in turn, beginning at the Spark task's partition
number (the same row goes to the same partition when a task is retried).

Arrow batches are split by Arrow kernels (a stable sort of the rows by their stream, then
``take``), so each stream's rows keep their order; only a key's hash is per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from ..topic.partitions import partition_for_key
from .arrow_encoding import row_numbers
from .levels import RowLevels
from .options import WriteOptions
from .topic import SparkTopic


def check_key_column(opts: WriteOptions, schema: Any) -> None:
    """Refuse, on the driver, a ``keyColumn`` that is not a string or binary column."""
    if opts.key_column is None:
        return
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in schema.fields}
    if opts.key_column not in fields:
        raise ConfigError(f"keyColumn {opts.key_column!r} is not a column of the DataFrame")
    kind = fields[opts.key_column]
    if not isinstance(kind, T.StringType | T.BinaryType):
        raise ConfigError(
            f"keyColumn {opts.key_column!r} is {kind.simpleString()}, but a key is text or "
            f"bytes: cast it, e.g. col({opts.key_column!r}).cast('string')"
        )


class RowRouter:
    """The stream of each row a Spark task writes (row numbers count from 0 per task)."""

    def __init__(
        self, opts: WriteOptions, columns: list[str], topic: SparkTopic, task: int
    ) -> None:
        self.count = count = topic.count
        self.key_column = opts.key_column
        self.key_index = columns.index(opts.key_column) if opts.key_column in columns else -1
        if opts.key_column is not None and self.key_index < 0:
            raise ConfigError(f"keyColumn {opts.key_column!r} is not a column of the DataFrame")
        self.start = task % count
        self.levels = RowLevels(opts, columns, topic.levels)

    def of_key(self, key: Any, number: int) -> int:
        """The partition of row ``number`` whose key is ``key``."""
        if self.count == 1:
            return 0
        if self.key_index < 0:
            return (self.start + number) % self.count
        if key is None:
            raise ConfigError(
                f"keyColumn {self.key_column!r} holds a null (row {number} of this Spark "
                "task): every row needs a key; filter such rows out or give them one"
            )
        return partition_for_key(key, self.count)

    def of_row(self, row: Any, number: int) -> int:
        """The index of row ``number``'s stream in the topic's streams."""
        partition = self.of_key(row[self.key_index] if self.key_index >= 0 else None, number)
        return self.levels.of_row(row, number) * self.count + partition

    def split(self, batch: Any, first: int) -> Iterator[tuple[int, Any, Any]]:
        """``(stream index, rows of batch going there, their row numbers)``, row order
        kept; the rows of ``batch`` are numbered from ``first``."""
        import pyarrow.compute as pc

        numbers = row_numbers(batch, first)
        levels = self.levels.of_batch(batch, first)
        partitions = self._partitions(batch, numbers, first)
        if isinstance(levels, int) and isinstance(partitions, int):  # one stream for all
            yield levels * self.count + partitions, batch, numbers
            return
        streams = pc.add(pc.multiply(levels, self.count), partitions)
        order = pc.sort_indices(streams)  # stable: each stream's rows keep their order
        runs = pc.value_counts(streams.take(order))  # in the sorted order: ascending
        start = 0
        for index, rows in zip(runs.field(0).to_pylist(), runs.field(1).to_pylist(),
                               strict=True):  # fmt: skip
            if rows == batch.num_rows:
                yield index, batch, numbers
                return
            taken = order.slice(start, rows)
            yield index, batch.take(taken), numbers.take(taken)
            start += rows

    def _partitions(self, batch: Any, numbers: Any, first: int) -> Any:
        """Each row's partition, an int64 array, or one int for them all (one partition)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.count == 1:
            return 0
        if self.key_index < 0:  # in turn: (start + number) % count
            turns = pc.add(numbers, self.start)
            return pc.subtract(turns, pc.multiply(pc.divide(turns, self.count), self.count))
        keys = batch.column(self.key_index)
        if keys.null_count:  # the first null's row, named
            self.of_key(None, first + pc.indices_nonzero(pc.is_null(keys))[0].as_py())
        count = self.count  # a key's hash: per row (no Arrow kernel)
        return pa.array([partition_for_key(k, count) for k in keys.to_pylist()], pa.int64())
