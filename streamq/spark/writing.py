"""Writing DataFrames to a stream: each row becomes a typed message (pipelined XADD).

``type`` comes from option ``type`` or the column ``typeColumn`` (default ``type``);
``data`` is the JSON string in ``dataColumn`` if given, else a JSON object of the other
columns; ``meta`` is the map column ``metaColumn`` (default ``meta``) if present, its
values as strings and its null values left out.

Writes use Spark's Arrow writers (batch writes on pyspark >= 4.0, streaming writes on
>= 4.1): rows arrive as column batches and are encoded by Arrow kernels
(``arrow_encoding.py``); streaming writes on pyspark 4.0 take rows one by one. With option
``compression`` (``zstd`` or ``gzip``, over ``compressOver`` bytes, 1024 by default) each
row's ``data`` is compressed as a queue compresses it, and with option ``keyringEnv``
encrypted with the current key of the keyring that environment variable holds on the
executor (with the meta values ``encryptMeta`` lists), as a queue with ``encryption=``
encrypts it (per row: not by Arrow kernels).

On a partitioned topic each row goes to one partition stream: by its key with option
``keyColumn``, else in turn; on a topic with priorities to the level of option
``priority`` or of its ``priorityColumn`` value, else the default level (see
``routing.py``, ``levels.py``); chunks are packed per stream. The ``priorityColumn`` is
not part of the payload.

Delivery: every message carries ``meta["streamq_producer_id"] =
<job>:<batch>:<partition>:<row>``, the same on every attempt of a deterministic input. A
Spark task that fails and is retried sends its partition again; with option
``idempotent`` (``auto`` by default: on Redis >= 8.6) each row is added under its producer
id and the retry adds nothing twice (:mod:`.idempotent`); otherwise consumers can drop
duplicates by it.

Rows are added with ``XADD ... NOMKSTREAM``, so a write notices a topic terminated under it
(the topic is found once, on the driver, for all the tasks of a write or of a streaming
micro-batch). Rows whose stream was missing (a new topic's first rows, or a topic
terminated during the write) are sent again, making the stream, once the topic's record is
found to still fit this write (and recorded again if a terminate took it); if it does not
(the topic was re-created with another partition count) the task fails with ConfigError
rather than add rows to streams no consumer of the topic reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import Any

import pydantic_core
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

try:  # pyspark >= 4.1: streaming writes get Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_ARROW = True
except ImportError:  # pyspark 4.0: rows
    _StreamWriterBase = DataSourceStreamWriter
    _STREAM_ARROW = False

from ..errors import ConfigError
from ..message import validate_type_name
from ..payload.encoding import PayloadCodec
from ..wire import resp
from .arrow_encoding import PRODUCER_ID, encode_batch
from .idempotent import RowKeys, row_keys
from .options import WriteOptions
from .routing import RowRouter
from .topic import SparkTopic, TopicClients, check_topic_again

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
    """Turns Spark rows into XADD field maps (per-row work kept to the minimum)."""

    def __init__(self, opts: WriteOptions, columns: list[str]) -> None:
        self.opts = opts
        if opts.type is None and opts.type_column not in columns:
            raise ConfigError(
                f"no message type: set option('type', ...) or add a {opts.type_column!r} column"
            )
        if opts.data_column is not None and opts.data_column not in columns:
            raise ConfigError(f"dataColumn {opts.data_column!r} is not a column of the DataFrame")
        skip = {opts.type_column, opts.meta_column, opts.priority_column, *_ENTRY_COLUMNS}
        self.payload_columns = [c for c in columns if c not in skip]
        self.payload_index = [columns.index(c) for c in self.payload_columns]
        self.type_index = columns.index(opts.type_column) if opts.type is None else -1
        self.meta_index = columns.index(opts.meta_column) if opts.meta_column in columns else -1
        self.data_index = columns.index(opts.data_column) if opts.data_column else -1
        self.fixed_type = validate_type_name(opts.type).encode() if opts.type else None
        PayloadCodec(opts.compression, opts.compress_over)  # checked on the driver too
        self.transforming = opts.compression is not None or opts.keyring_env is not None

    @cached_property
    def codec(self) -> PayloadCodec:
        """How each row's data is compressed and encrypted; the keyring is read when the
        first row is encoded: on an executor, whose environment holds it."""
        opts = self.opts
        return PayloadCodec(opts.compression, opts.compress_over, opts.keyring(), opts.encrypt_meta)

    def encode(self, row: Any, producer_id: str) -> dict[bytes | str, bytes | str]:
        if self.fixed_type is not None:
            type_field: bytes | str = self.fixed_type
        else:
            type_field = validate_type_name(str(row[self.type_index]))
        if self.data_index >= 0:
            data = _json_text(row[self.data_index])
        else:
            names, index = self.payload_columns, self.payload_index
            data = pydantic_core.to_json(
                {n: _plain(row[i]) for n, i in zip(names, index, strict=True)}
            )
        meta = _meta(row[self.meta_index]) if self.meta_index >= 0 else {}
        meta[PRODUCER_ID] = producer_id
        fields: dict[bytes | str, bytes | str] = {
            b"type": type_field, b"data": data, b"meta": pydantic_core.to_json(meta)
        }  # fmt: skip
        return self.codec.encode(fields) if self.transforming else fields


def _meta(column: Any) -> dict[str, str]:
    """A meta map cell (a dict in rows, key-value pairs from Arrow) as strings; a null
    value means no value, so its key is left out (publishing takes strings only)."""
    return {str(k): str(v) for k, v in dict(column or {}).items() if v is not None}


def _plain(value: Any) -> Any:
    """Spark Rows inside a row (structs) become dicts; everything else serialises as is."""
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _json_text(text: str | None) -> bytes:
    if text is None:
        raise ConfigError("dataColumn holds a null; every message needs JSON data")
    raw = text.encode()
    pydantic_core.from_json(raw)  # refuse what is not JSON, with the parser's reason
    return raw


@dataclass(frozen=True)
class Chunk:
    """Packed commands adding ``rows`` rows to the stream at index ``at`` of the topic's
    streams; ``again`` packs some of them (by position) anew with other :class:`RowKeys`."""

    packed: bytes
    rows: int
    at: int
    again: Callable[[list[int], RowKeys], bytes]


Chunks = Callable[[RowEncoder, RowRouter, str, RowKeys], Iterator[Chunk]]


def write_rows(
    opts: WriteOptions, columns: list[str], job: str, rows: Iterator[Any], topic: SparkTopic
) -> WrittenCount:
    """The row path (streaming writes on pyspark 4.0, which has no Arrow stream writer)."""

    def chunks(
        encoder: RowEncoder, router: RowRouter, prefix: str, keys: RowKeys
    ) -> Iterator[Chunk]:
        pending: dict[int, list[tuple[int, dict[bytes | str, bytes | str]]]] = {}

        def packed(at: int) -> Chunk:
            numbers, entries = zip(*pending.pop(at), strict=True)
            stream = topic.streams[at]

            def again(positions: list[int], other: RowKeys) -> bytes:
                picked = [numbers[i] for i in positions], [entries[i] for i in positions]
                return other.pack(stream, prefix, *picked)

            return Chunk(keys.pack(stream, prefix, numbers, entries), len(numbers), at, again)

        for n, row in enumerate(rows):
            at = router.of_row(row, n)
            chunk = pending.setdefault(at, [])
            chunk.append((n, encoder.encode(row, f"{prefix}:{n}")))
            if len(chunk) == opts.chunk:
                yield packed(at)
        for at in [i for i, chunk in pending.items() if chunk]:
            yield packed(at)

    return _send(opts, columns, job, chunks, topic)


def write_arrow(
    opts: WriteOptions, columns: list[str], job: str, batches: Iterator[Any], topic: SparkTopic
) -> WrittenCount:
    """The Arrow path: whole column batches encoded by Arrow kernels, sent in chunks."""

    def chunks(
        encoder: RowEncoder, router: RowRouter, prefix: str, keys: RowKeys
    ) -> Iterator[Chunk]:
        first = 0
        for batch in batches:
            for at, rows, numbers in router.split(batch, first):
                stream = topic.streams[at]
                for start in range(0, rows.num_rows, opts.chunk):
                    part = rows.slice(start, opts.chunk)
                    some = numbers.slice(start, opts.chunk)
                    packed = encode_batch(part, encoder, stream, prefix, numbers=some, keys=keys)
                    again = partial(_encode_some, part, some, encoder, stream, prefix)
                    yield Chunk(packed, len(some), at, again)
            first += batch.num_rows

    return _send(opts, columns, job, chunks, topic)


def _encode_some(
    rows: Any,
    numbers: Any,
    encoder: RowEncoder,
    stream: str,
    prefix: str,
    positions: list[int],
    keys: RowKeys,
) -> bytes:
    """The rows at ``positions`` of an Arrow chunk, packed anew with ``keys``."""
    return encode_batch(
        rows.take(positions), encoder, stream, prefix, numbers=numbers.take(positions), keys=keys
    )


def _send(
    opts: WriteOptions, columns: list[str], job: str, chunks: Chunks, topic: SparkTopic
) -> WrittenCount:
    """Send this task's packed chunks (pipelined XADDs, each to its stream) and
    count the rows. Rows whose stream was missing are sent again, making it, once the topic
    is found to be still the one this write was planned for."""
    partition, query, batch = _task_ids()
    prefix = f"{query or job}:{batch or 0}:{partition}"
    router = RowRouter(opts, columns, topic, partition)
    clients = TopicClients(opts.url, topic)
    count = 0
    try:
        keys = row_keys(opts.idempotent, clients.clients)
        adding = replace(keys, make_stream=False)
        for chunk in chunks(RowEncoder(opts, columns), router, prefix, adding):
            client = clients.clients[chunk.at]
            replies = resp.execute_sync(client, chunk.packed, chunk.rows)
            missing = [i for i, reply in enumerate(replies) if reply is None]
            if missing:
                check_topic_again(opts.url, topic)
                resp.execute_sync(client, chunk.again(missing, keys), len(missing))
            count += chunk.rows
    finally:
        clients.close()
    return WrittenCount(partition, count)


class _Writer:
    """What the batch and the stream writer hold: options and columns checked on the driver
    (before any task runs), the topic, and the job's part of the producer ids."""

    def __init__(
        self, opts: WriteOptions, columns: list[str], topic: SparkTopic | None = None
    ) -> None:
        self.topic = topic or SparkTopic(opts.stream, 1)
        RowEncoder(opts, columns)
        RowRouter(opts, columns, self.topic, 0)
        self.opts, self.columns = opts, columns
        self.job = uuid.uuid4().hex[:12]


class StreamqBatchWriter(_Writer, DataSourceArrowWriter):  # type: ignore[misc]
    def write(self, iterator: Iterator[Any]) -> WrittenCount:
        return write_arrow(self.opts, self.columns, self.job, iterator, self.topic)


class StreamqStreamWriter(_Writer, _StreamWriterBase):  # type: ignore[misc]
    def write(self, iterator: Iterator[Any]) -> WrittenCount:
        write = write_arrow if _STREAM_ARROW else write_rows
        return write(self.opts, self.columns, self.job, iterator, self.topic)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass  # entries are visible as soon as XADD returns

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass  # entries written before the failure stay; producer ids identify them
