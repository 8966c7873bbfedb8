"""Spark figures for `make bench` (warm session, local[2]): rows/s read through
format("streamq") and written with it, each against a plain redis-py yardstick
(an XRANGE COUNT 2000 loop; pipelined XADD in chunks of 1000)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import redis

from .workload import entries, fresh_stream, prefill, xadd_pipeline


def session() -> Any:
    import streamq.spark

    return streamq.spark.local_session(app_name="streamq-bench")


def raw_xrange(url: str, stream: str) -> float:
    client = redis.Redis.from_url(url)
    t0, count, cursor = time.perf_counter(), 0, "-"
    while rows := client.xrange(stream, min=cursor, max="+", count=2000):
        count += len(rows)
        cursor = "(" + rows[-1][0].decode()
    elapsed = time.perf_counter() - t0
    client.close()
    return count / elapsed


def spark_read(spark: Any, url: str, stream: str, n: int) -> float:
    df = (spark.read.format("streamq").option("url", url).option("stream", stream)
          .option("partitions", "2").load())  # fmt: skip
    t0 = time.perf_counter()
    count = df.selectExpr("count(*)", "max(length(data))").collect()[0][0]
    elapsed = time.perf_counter() - t0
    assert count == n, f"read {count} rows of {n}"
    return n / elapsed


def raw_xadd(url: str, n: int) -> float:
    client = redis.Redis.from_url(url)
    stream = fresh_stream("sparkrawpub")
    rows = entries(n)
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        xadd_pipeline(client, stream, rows[start : start + 1000]).execute()
    elapsed = time.perf_counter() - t0
    client.delete(stream)
    client.close()
    return n / elapsed


def spark_write(spark: Any, url: str, n: int) -> float:
    stream = fresh_stream("sparkwrite")
    df = spark.range(n).selectExpr(
        "concat('user', id, '@example.com') as to", "'Welcome aboard' as subject",
        "repeat('x', 24) as body", "cast(0 as double) as t",
    ).repartition(2).cache()  # fmt: skip
    df.count()
    t0 = time.perf_counter()
    df.write.format("streamq").option("url", url).option("stream", stream).option(
        "type", "email"
    ).mode("append").save()
    elapsed = time.perf_counter() - t0
    client = redis.Redis.from_url(url)
    written = client.xlen(stream)
    client.delete(stream)
    client.close()
    assert written == n, f"wrote {written} of {n}"
    return n / elapsed


def emit_pair(
    emit: Any, rows: int, figure: tuple[str, float], raw: tuple[str, float], ratio_to: str
) -> None:
    """A figure (name, rows/s) with its ratio to the yardstick ``raw`` measured next to it
    (as ``ratio_to_<ratio_to>``), then the yardstick."""
    (name, rate), (raw_name, raw_rate) = figure, raw
    ratio = {f"ratio_to_{ratio_to}": round(rate / raw_rate, 3)}
    emit(bench=name, rows=rows, rows_per_s=round(rate), **ratio)
    emit(bench=raw_name, rows=rows, rows_per_s=round(raw_rate))


def run(url: str, n: int, emit: Any) -> None:
    spark = session()
    try:
        stream = fresh_stream("sparkread")
        anyio.run(prefill, url, stream, n)
        spark_read(spark, url, stream, n)  # warm-up: JVM, Python workers
        read = max(spark_read(spark, url, stream, n) for _ in range(2))
        raw = raw_xrange(url, stream)
        emit_pair(emit, n, ("spark_read", read), ("raw_xrange", raw), "raw_xrange")
        redis.Redis.from_url(url).delete(stream)
        spark_write(spark, url, n // 4)  # warm-up
        write = max(spark_write(spark, url, n) for _ in range(2))
        raw_w = raw_xadd(url, n)
        yardstick = ("raw_xadd_sync_pipelined", raw_w)
        emit_pair(emit, n, ("spark_write", write), yardstick, "raw_xadd")
    finally:
        spark.stop()
