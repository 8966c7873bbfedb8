"""Which priority level of a topic with priorities each written row goes to.

Option ``priority`` gives every row one level; option ``priorityColumn`` names an integer
column holding each row's level, a null taking the level of option ``priority`` if given,
else the topic's default (the middle one, as ``publish()`` without ``priority=``). Levels
are checked as ``publish(priority=)`` checks them: 0 (the highest) to ``N - 1``, and
neither option on a topic without priorities. The option and the column's type are
checked on the driver, before any task runs; the column's values by each task, whose
error names the row. Rows read from a topic with priorities keep their level when
written back with ``priorityColumn="priority"``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..wire.partition_names import check_priority, default_level
from .options import WriteOptions


def check_levels(opts: WriteOptions, schema: Any, name: str, levels: int) -> None:
    """Refuse, on the driver, a priority option the topic ``name`` (of ``levels`` levels)
    cannot take, or a ``priorityColumn`` that is not an integer column."""
    if opts.priority is None and opts.priority_column is None:
        return
    if levels == 1:
        given = "priority" if opts.priority is not None else "priorityColumn"
        raise ConfigError(
            f"option {given!r}, but topic {name!r} has no priorities: a topic gets them "
            "when its first queue opens it with MessageQueue(..., priorities=N)"
        )
    if opts.priority is not None:
        try:
            check_priority(opts.priority, levels)
        except ConfigError as e:
            raise ConfigError(f"option 'priority': {e}") from None
    if opts.priority_column is not None:
        _check_column(opts.priority_column, schema)


def _check_column(column: str, schema: Any) -> None:
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in schema.fields}
    if column not in fields:
        raise ConfigError(f"priorityColumn {column!r} is not a column of the DataFrame")
    kind = fields[column]
    if not isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        raise ConfigError(
            f"priorityColumn {column!r} is {kind.simpleString()}, but a level is an integer "
            f"(0 the highest): cast it, e.g. col({column!r}).cast('int')"
        )


class RowLevels:
    """The level of each row a Spark task writes (row numbers count from 0 per task)."""

    def __init__(self, opts: WriteOptions, columns: list[str], levels: int) -> None:
        self.levels = levels
        self.column = opts.priority_column
        self.index = columns.index(self.column) if self.column in columns else -1
        if self.column is not None and self.index < 0:
            raise ConfigError(f"priorityColumn {self.column!r} is not a column of the DataFrame")
        self.fixed = default_level(levels) if opts.priority is None else opts.priority

    def of_value(self, value: Any, number: int) -> int:
        """The level of row ``number`` whose column holds ``value``."""
        if value is None:
            return self.fixed
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.levels:
            raise ConfigError(
                f"priorityColumn {self.column!r} holds {value!r} (row {number} of this Spark "
                f"task), but the topic's levels are 0 (highest) to {self.levels - 1} "
                "(lowest); a null takes the default level"
            )
        return value

    def of_row(self, row: Any, number: int) -> int:
        return self.of_value(row[self.index], number) if self.index >= 0 else self.fixed

    def of_batch(self, batch: Any, first: int) -> Any:
        """Each row's level, an int64 array (by Arrow kernels), or one int for them all;
        ConfigError naming the first row whose level the topic does not have."""
        if self.index < 0:
            return self.fixed
        import pyarrow as pa
        import pyarrow.compute as pc

        column = batch.column(self.index)
        if not pa.types.is_integer(column.type):  # a column the driver saw as integer
            raise ConfigError(f"priorityColumn {self.column!r} is {column.type}, not an integer")
        chosen = pc.fill_null(pc.cast(column, pa.int64()), self.fixed)
        outside = pc.or_(pc.less(chosen, 0), pc.greater_equal(chosen, self.levels))
        if pc.any(outside).as_py():
            at = pc.indices_nonzero(outside)[0].as_py()
            self.of_value(chosen[at].as_py(), first + at)
        return chosen
