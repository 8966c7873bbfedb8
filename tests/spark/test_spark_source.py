"""format("streamq") against a real server and a real local SparkSession."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import streamq.spark
from handlers.order_handler import Order
from streamq._ids import StreamId
from tests.spark.streaming import run_available_now, start_available_now

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def add(r: Any, stream: str, n: int, start: int = 0, type_name: str = "order") -> list[str]:
    ids = []
    for i in range(start, start + n):
        data = Order(order_id=f"o{i}", customer=f"c{i % 3}", amount=Decimal(i)).model_dump_json()
        ids.append(r.xadd(stream, {"type": type_name, "data": data}).decode())
    return ids


def stream_reader(spark: Any, url: str, stream: str, **options: str) -> Any:
    reader = spark.readStream.format("streamq").option("url", url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def test_batch_read_rows(spark: Any, redis_url: str, stream: str, r: Any) -> None:
    ids = add(r, stream, 5)
    r.xadd(stream, {"type": "email", "data": '{"to":"a@b.c"}', "meta": '{"k":"v"}'})
    df = spark.read.format("streamq").option("url", redis_url).option("stream", stream).load()
    rows = df.orderBy("id").collect()
    assert [row.id for row in rows[:5]] == ids
    assert rows[5].type == "email" and rows[5].data == '{"to":"a@b.c"}'
    assert rows[5].meta == {"k": "v"}
    assert rows[0].published_at.year >= 2024
    only = spark.read.format("streamq").option("url", redis_url).option("stream", stream)
    assert only.option("type", "email").load().count() == 1


def test_restart_reads_only_new_entries(
    spark: Any, redis_url: str, stream: str, r: Any, tmp_path: Path
) -> None:
    add(r, stream, 10)
    reader = stream_reader(spark, redis_url, stream)
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    assert spark.read.parquet(str(tmp_path / "out")).count() == 10
    new_ids = add(r, stream, 4, start=10)
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 14, "a restarted query must continue from its checkpoint"
    assert sorted(row.id for row in out.collect())[-4:] == sorted(new_ids, key=StreamId.parse)


def admission_control() -> bool:
    """pyspark >= 4.2 passes read limits to sources (and to AvailableNow runs)."""
    import pyspark

    major, minor = (int(p) for p in pyspark.__version__.split(".")[:2])
    return (major, minor) >= (4, 2)


def test_max_records_per_batch_splits_batches(
    spark: Any, redis_url: str, stream: str, r: Any, tmp_path: Path
) -> None:
    if not admission_control():
        pytest.skip("pyspark < 4.2 runs AvailableNow as one batch, whatever the limit")
    add(r, stream, 25)
    reader = stream_reader(spark, redis_url, stream, maxRecordsPerBatch="10", partitions="2")
    query = run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [10, 10, 5], f"micro-batch sizes {sizes}"
    assert spark.read.parquet(str(tmp_path / "out")).count() == 25


def test_typed_columns_from_a_registered_model(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    streamq.spark.register(spark, models={"order": Order})
    add(r, stream, 3)
    r.xadd(stream, {"type": "email", "data": '{"to":"x@y"}'})  # other types are not rows here
    df = (
        spark.read.format("streamq").option("url", redis_url).option("stream", stream)
        .option("type", "order").load()
    )  # fmt: skip
    assert df.columns == [
        "id",
        "type",
        "order_id",
        "customer",
        "amount",
        "items",
        "meta",
        "published_at",
        "ver",
    ]
    assert dict(df.dtypes)["amount"].startswith("decimal")
    rows = df.orderBy("order_id").collect()
    assert [(row.order_id, row.customer, row.amount) for row in rows] == [
        ("o0", "c0", Decimal(0)), ("o1", "c1", Decimal(1)), ("o2", "c2", Decimal(2)),
    ]  # fmt: skip


def test_trimmed_range_is_detected(
    spark: Any, redis_url: str, stream: str, r: Any, tmp_path: Path
) -> None:
    add(r, stream, 5)
    reader = stream_reader(spark, redis_url, stream)
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    add(r, stream, 5, start=5)
    r.xtrim(stream, maxlen=2, approximate=False)  # 3 unread entries are gone
    query = start_available_now(reader.load(), tmp_path / "ckpt", tmp_path / "out")
    with pytest.raises(Exception, match="removed before the pipeline read them"):
        query.awaitTermination(120)
    lenient = stream_reader(spark, redis_url, stream, failOnDataLoss="false")
    run_available_now(lenient, tmp_path / "ckpt", tmp_path / "out")
    assert spark.read.parquet(str(tmp_path / "out")).count() == 7


async def test_group_advanced_on_commit_and_visible_in_topic_info(
    spark: Any, redis_url: str, stream: str, r: Any, tmp_path: Path
) -> None:
    from streamq import MessageQueue

    ids = add(r, stream, 8)
    reader = stream_reader(spark, redis_url, stream, group="spark-archive", maxRecordsPerBatch="5")
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    ids += add(r, stream, 3, start=8)
    mq = MessageQueue(redis_url, stream=stream)
    group = (await mq.topic_info()).group("spark-archive")
    if admission_control():
        assert group.last_delivered_id == ids[7], "the group must reach the last processed entry"
    else:  # pyspark < 4.2 never tells the source that the last batch of a run is done
        assert StreamId.parse(group.last_delivered_id) <= StreamId.parse(ids[7])
    at = StreamId.parse(group.last_delivered_id)
    assert group.lag == sum(StreamId.parse(i) > at for i in ids), "lag must count unread entries"
    assert group.pending == 0, "Spark must not hold entries in the group's pending list"
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    group = (await mq.topic_info()).group("spark-archive")
    assert StreamId.parse(group.last_delivered_id) >= StreamId.parse(ids[7])
    assert spark.read.parquet(str(tmp_path / "out")).count() == 11
    await mq.aclose()


test_group_advanced_on_commit_and_visible_in_topic_info = pytest.mark.anyio(
    test_group_advanced_on_commit_and_visible_in_topic_info
)


def test_batch_write_then_consume(spark: Any, redis_url: str, stream: str, r: Any) -> None:
    df = spark.createDataFrame(
        [("o1", "ada", Decimal("1.50")), ("o2", "bob", Decimal("2.25"))],
        "order_id string, customer string, amount decimal(10,2)",
    )
    df.write.format("streamq").option("url", redis_url).option("stream", stream).option(
        "type", "order"
    ).mode("append").save()
    entries = r.xrange(stream)
    assert len(entries) == 2
    orders = sorted(
        (Order.model_validate_json(f[b"data"]) for _, f in entries), key=lambda o: o.order_id
    )
    assert [(o.order_id, o.amount) for o in orders] == [
        ("o1", Decimal("1.50")),
        ("o2", Decimal("2.25")),
    ]
    producer_ids = {f[b"meta"] for _, f in entries}
    assert all(b"streamq_producer_id" in m for m in producer_ids) and len(producer_ids) == 2


def test_overwrite_is_refused(spark: Any, redis_url: str, stream: str) -> None:
    df = spark.createDataFrame([("x",)], "data string")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("streamq").option("url", redis_url).option("stream", stream).option(
            "type", "note"
        ).mode("overwrite").save()


def test_missing_options_are_clear_errors(spark: Any, redis_url: str) -> None:
    with pytest.raises(Exception, match="option 'stream' is required"):
        spark.read.format("streamq").option("url", redis_url).load().collect()
