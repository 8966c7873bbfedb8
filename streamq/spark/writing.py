"""Writing DataFrames to a stream: each row becomes a typed message (pipelined XADD).

``type`` comes from option ``type`` or the column ``typeColumn`` (default ``type``);
``data`` is the JSON string in ``dataColumn`` if given, else a JSON object of the other
columns; ``meta`` is the map column ``metaColumn`` (default ``meta``) if present.

Delivery: at-least-once. A Spark task that fails and is retried sends its partition again,
so every message carries ``meta["streamq_producer_id"] = <job>:<batch>:<partition>:<row>``,
the same on every attempt of a deterministic input: consumers can drop duplicates by it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ..errors import ConfigError
from ..message import encode_entry
from .options import WriteOptions

PRODUCER_ID = "streamq_producer_id"
_ENTRY_COLUMNS = {"id", "published_at"}


@dataclass
class WrittenCount(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    rows: int


def _task_ids() -> tuple[int, str | None, str | None]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, None, None
    return (
        context.partitionId(),
        context.getLocalProperty("sql.streaming.queryId"),
        context.getLocalProperty("streaming.sql.batchId"),
    )


class RowEncoder:
    """Turns Spark rows into XADD field maps."""

    def __init__(self, opts: WriteOptions, columns: list[str]) -> None:
        self.opts = opts
        if opts.type is None and opts.type_column not in columns:
            raise ConfigError(
                f"no message type: set option('type', ...) or add a {opts.type_column!r} column"
            )
        if opts.data_column is not None and opts.data_column not in columns:
            raise ConfigError(f"dataColumn {opts.data_column!r} is not a column of the DataFrame")
        skip = {opts.type_column, opts.meta_column, *_ENTRY_COLUMNS}
        self.payload_columns = [c for c in columns if c not in skip]

    def encode(self, row: Any, producer_id: str) -> dict[bytes | str, bytes | str]:
        values = row.asDict(recursive=True)
        type_name = self.opts.type or values.get(self.opts.type_column)
        if self.opts.data_column is not None:
            data: Any = _RawJson(values[self.opts.data_column])
        else:
            data = {c: values[c] for c in self.payload_columns}
        meta = {str(k): str(v) for k, v in (values.get(self.opts.meta_column) or {}).items()}
        meta[PRODUCER_ID] = producer_id
        fields = encode_entry(str(type_name), data if not isinstance(data, _RawJson) else None, meta)
        if isinstance(data, _RawJson):
            fields[b"data"] = data.text
        return fields


class _RawJson:
    def __init__(self, text: str) -> None:
        import pydantic_core

        if text is None:
            raise ConfigError("dataColumn holds a null; every message needs JSON data")
        pydantic_core.from_json(text)  # refuse what is not JSON, with the parser's reason
        self.text = text


def write_rows(opts: WriteOptions, columns: list[str], job: str, rows: Iterator[Any]) -> WrittenCount:
    import redis

    partition, query, batch = _task_ids()
    encoder = RowEncoder(opts, columns)
    prefix = f"{query or job}:{batch or 0}:{partition}"
    client = redis.Redis.from_url(opts.url)
    count = 0
    try:
        pipe = client.pipeline(transaction=False)
        for count, row in enumerate(rows, start=1):
            pipe.xadd(opts.stream, encoder.encode(row, f"{prefix}:{count - 1}"))  # type: ignore[arg-type]
            if count % opts.chunk == 0:
                pipe.execute()
        pipe.execute()
    finally:
        client.close()
    return WrittenCount(partition, count)


class StreamqBatchWriter(DataSourceWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions, columns: list[str]) -> None:
        RowEncoder(opts, columns)  # validate on the driver, before any task runs
        self.opts, self.columns = opts, columns
        self.job = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[Any]) -> WrittenCount:
        return write_rows(self.opts, self.columns, self.job, iterator)


class StreamqStreamWriter(DataSourceStreamWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions, columns: list[str]) -> None:
        RowEncoder(opts, columns)
        self.opts, self.columns = opts, columns
        self.job = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[Any]) -> WrittenCount:
        return write_rows(self.opts, self.columns, self.job, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        pass  # entries are visible as soon as XADD returns

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        pass  # entries written before the failure stay; producer ids identify them
