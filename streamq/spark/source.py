"""The ``streamq`` data source: ties the options to the readers and writers."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource

from ..errors import ConfigError
from .options import ReadOptions, WriteOptions
from .reading import StreamqBatchReader, StreamqStreamReader
from .schema import ENTRY_SCHEMA, typed_schema
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
        opts = self._read_options()
        model = opts.model()
        return typed_schema(model) if model is not None else ENTRY_SCHEMA

    def reader(self, schema: Any) -> StreamqBatchReader:
        return StreamqBatchReader(self._read_options())

    def streamReader(self, schema: Any) -> StreamqStreamReader:
        return StreamqStreamReader(self._read_options())

    def writer(self, schema: Any, overwrite: bool) -> StreamqBatchWriter:
        if overwrite:
            raise ConfigError(
                "streamq streams are append-only: mode('overwrite') is refused; use "
                "mode('append'), or terminate the topic first if you mean to replace it"
            )
        return StreamqBatchWriter(WriteOptions.parse(self.options), schema.fieldNames())

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamqStreamWriter:
        if overwrite:
            raise ConfigError("streamq streams are append-only: outputMode complete is refused")
        return StreamqStreamWriter(WriteOptions.parse(self.options), schema.fieldNames())
