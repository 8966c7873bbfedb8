"""Which partition of a partitioned topic each written row goes to.

With option ``keyColumn``, a row goes to the partition of its key, by the same hash as
``publish(key=...)`` (CRC32 of the key's UTF-8 bytes, modulo the partition count:
:func:`~streamq.topic.partitions.partition_for_key`), so Spark and the services agree on
where a customer's messages are, and rows of one key written by one Spark task keep their
order. Without it, rows take the partitions in turn, beginning at the Spark task's partition
number (the same row goes to the same partition when a task is retried).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from ..topic.partitions import partition_for_key
from .options import WriteOptions


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
    """The partition of each row a Spark task writes (row numbers count from 0 per task)."""

    def __init__(self, opts: WriteOptions, columns: list[str], count: int, task: int) -> None:
        self.count = count
        self.key_column = opts.key_column
        self.key_index = columns.index(opts.key_column) if opts.key_column in columns else -1
        if opts.key_column is not None and self.key_index < 0:
            raise ConfigError(f"keyColumn {opts.key_column!r} is not a column of the DataFrame")
        self.start = task % count

    def of_key(self, key: Any, number: int) -> int:
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
        return self.of_key(row[self.key_index] if self.key_index >= 0 else None, number)

    def split(self, batch: Any, first: int) -> Iterator[tuple[int, Any, Any]]:
        """``(partition, rows of batch going there, their row numbers)``, row order kept."""
        import pyarrow as pa

        numbers = pa.array(range(first, first + batch.num_rows), pa.int64())
        if self.count == 1:
            yield 0, batch, numbers
            return
        keys = (
            batch.column(self.key_index).to_pylist()
            if self.key_index >= 0
            else [None] * batch.num_rows
        )
        rows: list[list[int]] = [[] for _ in range(self.count)]
        for n, key in enumerate(keys):
            rows[self.of_key(key, first + n)].append(n)
        for index, taken in enumerate(rows):
            if taken:
                chosen = pa.array(taken, pa.int64())
                yield index, batch.take(chosen), numbers.take(chosen)
