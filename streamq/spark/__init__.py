"""Apache Spark integration (extra ``[spark]``): ``format("streamq")`` for read and write.

import streamq.spark
streamq.spark.register(spark, models={"order": Order})
df = spark.readStream.format("streamq").option("url", url).option("stream", "orders").load()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .reading import DataLossError
from .source import StreamqDataSource

__all__ = ("DataLossError", "StreamqDataSource", "register")


def register(spark: Any, models: Mapping[str, type] | None = None) -> None:
    """Register the ``streamq`` format on ``spark``.

    ``models`` maps message types to pydantic models, so that ``.option("type", t)`` reads
    typed columns without naming the model. Models must be importable on the executors.
    """
    paths = {t: f"{m.__module__}:{m.__qualname__}" for t, m in (models or {}).items()}
    source = type("StreamqDataSource", (StreamqDataSource,), {"models": paths})
    spark.dataSource.register(source)
