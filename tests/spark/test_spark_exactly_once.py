"""A Spark task that fails after sending part of its partition and is tried again
publishes each row once: the retry sends the same rows with the same idempotency keys
(``XADD ... IDMP`` on Redis >= 8.6, the fallback script elsewhere with ``idempotent=true``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import streamq.spark
from streamq.wire.client import connect_sync
from streamq.wire.features import probe_sync
from tests.helpers.clients import sync_client

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

ROWS, FAIL_AT, PAD, BATCH = 3000, 2500, 200, 100


@pytest.fixture
def small_batches(spark: Any) -> Iterator[None]:
    """The writer gets (and sends) the rows 100 at a time, not all at once at the end; the
    data source registered (these tests may run first, or alone)."""
    streamq.spark.register(spark)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(BATCH))
    yield
    spark.conf.set(key, before)


def write_failing_once(spark: Any, url: str, stream: str, **options: str) -> None:
    """Write rows 0..ROWS-1 in one task, which fails at row FAIL_AT on its first attempt
    (a UDF) and is tried again. The UDF's worker hands its results on 64 KB at a time,
    so each row carries PAD bytes (rows reach the writer, which sends them, before the
    failure) and the failure waits a moment for the writer to catch up."""
    from pyspark.sql.functions import col, udf

    fail_at, pad = FAIL_AT, PAD

    def padding_failing_once(n: int) -> str:  # nested: pickled by value for the worker
        import time

        from pyspark import TaskContext

        if n == fail_at and TaskContext.get().attemptNumber() == 0:
            time.sleep(2)
            raise RuntimeError("the first attempt of this task fails")
        return "x" * pad

    rows = spark.range(0, ROWS, 1, 1)
    padding = udf(padding_failing_once, "string", useArrow=False)
    df = rows.select(col("id").alias("n"), padding(col("id")).alias("pad"))
    writer = df.write.format("streamq").option("url", url).option("stream", stream)
    writer = writer.option("type", "job").option("chunk", str(BATCH))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def published(r: Any, stream: str) -> Counter[int]:
    return Counter(json.loads(fields[b"data"])["n"] for _, fields in r.xrange(stream))


def server_has_idmp(url: str, stream: str) -> bool:
    deployment = connect_sync(url)
    try:
        return probe_sync(deployment.client_for(stream)).xadd_idmp
    finally:
        deployment.close()


@pytest.mark.usefixtures("small_batches")
def test_a_retried_task_publishes_every_row_exactly_once(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    write_failing_once(spark, redis_url, stream, idempotent="true")
    assert published(r, stream) == Counter(range(ROWS))


@pytest.mark.usefixtures("small_batches")
def test_without_idempotency_the_retry_publishes_the_sent_rows_again(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    """What the test above guards against: the first attempt did send rows."""
    write_failing_once(spark, redis_url, stream, idempotent="false")
    counts = published(r, stream)
    assert set(counts) == set(range(ROWS))
    assert counts[0] == 2 and counts[FAIL_AT] == 1


@pytest.mark.usefixtures("small_batches")
def test_by_default_a_retry_is_idempotent_where_the_server_has_idmp(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    """Default ``idempotent=auto``: Redis >= 8.6 drops the retry's duplicates itself;
    elsewhere rows are at-least-once (the fallback costs a key per row for an hour)."""
    write_failing_once(spark, redis_url, stream)
    twice = {n for n, count in published(r, stream).items() if count > 1}
    assert (twice == set()) if server_has_idmp(redis_url, stream) else (0 in twice)


@pytest.mark.parametrize("partitions", [1, 3])
def test_the_row_path_sent_twice_adds_each_row_once(
    redis_url: str, stream: str, partitions: int
) -> None:
    """The row path (streaming writes on pyspark 4.0), without Spark: a task's rows sent
    a second time under the same job (a retry) add nothing, on each partition stream."""
    from streamq.spark.options import WriteOptions
    from streamq.spark.topic import SparkTopic
    from streamq.spark.writing import write_rows

    opts = WriteOptions.parse({"url": redis_url, "stream": stream, "type": "job",
                               "chunk": "7", "idempotent": "true"})  # fmt: skip
    topic = SparkTopic(stream, partitions)
    for _ in range(2):
        written = write_rows(opts, ["n"], "job1", iter([(n,) for n in range(250)]), topic)
        assert written.rows == 250
    counts: Counter[int] = Counter()
    for name in topic.streams:
        with sync_client(redis_url, name) as client:
            counts += published(client, name)
    assert counts == Counter(range(250))
