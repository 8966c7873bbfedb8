"""Apache Spark integration (extra ``[spark]``): ``format("streamq")`` for read and write.

import streamq.spark
streamq.spark.register(spark, models={"order": Order})
df = spark.readStream.format("streamq").option("url", url).option("stream", "orders").load()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import DataLossError
from .options import model_path
from .source import StreamqDataSource

__all__ = ("DataLossError", "StreamqDataSource", "local_session", "register")


def register(spark: Any, models: Mapping[str, type] | None = None) -> None:
    """Register the ``streamq`` format on ``spark``.

    ``models`` maps message types to pydantic models, so that ``.option("type", t)`` reads
    typed columns without naming the model. The executors import each model by its
    ``module:qualname``, so it must live at module level in a module installed or shipped
    there (``--py-files``, ``spark.addArtifacts``), not in the script itself (``__main__``).

    Raises ConfigError for a model that cannot be imported by that name, saying why.
    """
    paths = {t: model_path(t, m) for t, m in (models or {}).items()}
    source = type("StreamqDataSource", (StreamqDataSource,), {"models": paths})
    spark.dataSource.register(source)


def local_session(master: str = "local[2]", app_name: str = "streamq", **conf: str) -> Any:
    """A local SparkSession bound to loopback, quiet, UTC, with ``streamq`` registered
    (for demos, tests and benchmarks on one machine; clusters bring their own session)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
