"""The ``streamq`` data source: ties the options to the readers and writers."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource

from ..errors import ConfigError
from .levels import check_levels
from .options import ReadOptions, WriteOptions
from .reading import StreamqBatchReader, StreamqStreamReader
from .routing import check_key_column
from .schema import ENTRY_SCHEMA, LEVELLED_ENTRY_SCHEMA, PARTITIONED_ENTRY_SCHEMA, typed_schema
from .topic import SparkTopic, resolve_topic
from .writing import StreamqBatchWriter, StreamqStreamWriter


class StreamqDataSource(DataSource):  # type: ignore[misc]
    """``format("streamq")``. See the README's Spark section for the options."""

    models: ClassVar[dict[str, str]] = {}  # type name -> "module:Class", set by register()

    @classmethod
    def name(cls) -> str:
        return "streamq"

    def _read_options(self) -> ReadOptions:
        return ReadOptions.parse(self.options, self.models)

    def schema(self) -> Any:
        """The rows' schema; a partitioned topic's rows have a last column ``partition``,
        and a topic with priorities' rows ``partition`` and ``priority`` (the topic is
        looked up in Redis: a plain stream's schema stays as it always was)."""
        opts = self._read_options()
        topic = resolve_topic(opts.url, opts.stream, opts.topic_partitions)
        model = opts.model()
        levelled = topic.levels > 1
        if model is not None:
            return typed_schema(model, topic.partitioned, levelled)
        if levelled:
            return LEVELLED_ENTRY_SCHEMA
        return PARTITIONED_ENTRY_SCHEMA if topic.partitioned else ENTRY_SCHEMA

    def _read_topic(self, opts: ReadOptions, schema: Any) -> SparkTopic:
        topic = resolve_topic(opts.url, opts.stream, opts.topic_partitions)
        if topic.partitioned and "partition" not in schema.fieldNames():
            raise ConfigError(
                f"topic {opts.stream!r} has {topic.count} partitions, but the DataFrame was "
                "defined when it had none (or with a schema of its own): load() it again"
            )
        if topic.levels > 1 and "priority" not in schema.fieldNames():
            raise ConfigError(
                f"topic {opts.stream!r} has {topic.levels} priority levels, but the DataFrame "
                "was defined without its priority column: load() it again"
            )
        return topic

    def reader(self, schema: Any) -> StreamqBatchReader:
        opts = self._read_options()
        return StreamqBatchReader(opts, self._read_topic(opts, schema))

    def streamReader(self, schema: Any) -> StreamqStreamReader:
        opts = self._read_options()
        return StreamqStreamReader(opts, self._read_topic(opts, schema))

    def _write_topic(self, schema: Any) -> tuple[WriteOptions, SparkTopic]:
        opts = WriteOptions.parse(self.options)
        check_key_column(opts, schema)
        topic = resolve_topic(opts.url, opts.stream, opts.topic_partitions)
        check_levels(opts, schema, topic.name, topic.levels)
        return opts, topic

    def writer(self, schema: Any, overwrite: bool) -> StreamqBatchWriter:
        if overwrite:
            raise ConfigError(
                "streamq streams are append-only: mode('overwrite') is refused; use "
                "mode('append'), or terminate the topic first if you mean to replace it"
            )
        opts, topic = self._write_topic(schema)
        return StreamqBatchWriter(opts, schema.fieldNames(), topic)

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamqStreamWriter:
        if overwrite:
            raise ConfigError("streamq streams are append-only: outputMode complete is refused")
        opts, topic = self._write_topic(schema)
        return StreamqStreamWriter(opts, schema.fieldNames(), topic)
