"""One SparkSession for all Spark tests (one core, a failed task tried again once as
on a cluster, small shuffles, no UI)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="Spark tests need the [spark] extra")


# The keyring the payload tests read with option("keyringEnv", ...): set before the session
# starts, so that the Python workers Spark launches inherit it, as executors would.
KEYRING_VARIABLE = "STREAMQ_TEST_SPARK_KEYRING"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import streamq.spark
    from tests.payload.helpers import KEY1

    keys = {"k1": base64.b64encode(KEY1).decode()}
    os.environ[KEYRING_VARIABLE] = json.dumps({"current": "k1", "keys": keys})

    session = streamq.spark.local_session(
        "local[1,2]", "streamq-tests", **{"spark.sql.shuffle.partitions": "1"}
    )
    yield session
    session.stop()
