"""One SparkSession for all Spark tests (one core, a failed task tried again once as
on a cluster, small shuffles, no UI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="Spark tests need the [spark] extra")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import streamq.spark

    session = streamq.spark.local_session(
        "local[1,2]", "streamq-tests", **{"spark.sql.shuffle.partitions": "1"}
    )
    yield session
    session.stop()
