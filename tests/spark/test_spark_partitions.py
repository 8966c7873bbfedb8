"""format("streamq") on partitioned topics: reads with one input partition per topic
partition and offsets per partition, an exact restart, the pipeline group moved on every
partition, writes by key; on one node and on the embedded cluster."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import streamq.spark
from handlers.order_handler import Order
from streamq import MessageQueue
from streamq.errors import ConfigError
from streamq.spark.topic import SparkTopic
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import PartitionedId, partition_for_key, partition_streams
from streamq.wire.client import connect_sync
from streamq.wire.keys import Keys
from streamq.wire.partition_names import topic_streams
from streamq.wire.replies import text
from tests.spark.streaming import run_available_now, start_available_now
from tests.spark.test_spark_source import admission_control, stream_reader

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

PARTS = 4
CUSTOMERS = [f"customer-{n}" for n in range(7)]


def forget(url: str, topic: str) -> None:
    for name in (*partition_streams(topic, PARTS), topic):
        delete_stream_keys(url, name)


@pytest.fixture
def topic(redis_url: str) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    forget(redis_url, name)


async def publish_orders(url: str, topic: str, n: int, start: int = 0) -> dict[str, str]:
    """Publish ``n`` orders keyed by customer to a topic of PARTS partitions (recorded by
    opening the queue); return {entry ID: customer}."""
    orders = [
        Order(order_id=f"o{i:03}", customer=CUSTOMERS[i % len(CUSTOMERS)], amount=Decimal(i))
        for i in range(start, start + n)
    ]
    async with MessageQueue(url, stream=topic, group="services", partitions=PARTS) as mq:
        ids = await mq.publish_many("order", orders, key=lambda o: o.customer)
    return {entry_id: order.customer for entry_id, order in zip(ids, orders, strict=True)}


def entries(url: str, stream: str) -> list[tuple[str, dict[str, Any]]]:
    """(ID, data) of every entry of one stream, in stream order."""
    with connect_sync(url).client_for(stream, owner=True) as client:
        return [(text(i), json.loads(f[b"data"])) for i, f in client.xrange(stream)]


def group_positions(url: str, topic: str, group: str) -> list[tuple[str, str | None]]:
    """(group's last-delivered ID, last entry ID) on each partition stream."""
    positions = []
    for stream in partition_streams(topic, PARTS):
        with connect_sync(url).client_for(stream, owner=True) as client:
            groups = {text(g["name"]): g for g in client.xinfo_groups(stream)}
            last = client.xrevrange(stream, count=1)
            positions.append(
                (text(groups[group]["last-delivered-id"]), text(last[0][0]) if last else None)
            )
    return positions


def last_checkpointed_offset(checkpoint: Path) -> dict[str, Any]:
    """The source's end offset of the last batch in Spark's offset log."""
    log = max((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(log.read_text().splitlines()[-1])  # type: ignore[no-any-return]


def check_rows_name_their_partitions(rows: list[Any], published: dict[str, str]) -> None:
    ids = [row.id for row in rows]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates, f"entries read twice: {duplicates}"
    assert set(ids) == set(published), f"missing {set(published) - set(ids)}"
    for row in rows:
        named = PartitionedId.parse(row.id, PARTS).partition
        assert row.partition == named == partition_for_key(published[row.id], PARTS), row


@pytest.mark.anyio
async def test_batch_read_has_an_input_partition_per_topic_partition(
    spark: Any, redis_url: str, topic: str
) -> None:
    published = await publish_orders(redis_url, topic, 28)
    used = {PartitionedId.parse(i, PARTS).partition for i in published}
    df = spark.read.format("streamq").option("url", redis_url).option("stream", topic).load()
    assert df.columns == ["id", "type", "data", "meta", "published_at", "ver", "partition"]
    assert df.rdd.getNumPartitions() == len(used), "one input partition per topic partition"
    check_rows_name_their_partitions(df.collect(), published)

    finer = (
        spark.read.format("streamq").option("url", redis_url).option("stream", topic)
        .option("partitions", str(2 * PARTS)).load()
    )  # fmt: skip
    assert finer.rdd.getNumPartitions() == 2 * len(used), "split by ID range within each"
    check_rows_name_their_partitions(finer.collect(), published)

    streamq.spark.register(spark, models={"order": Order})
    typed = (
        spark.read.format("streamq").option("url", redis_url).option("stream", topic)
        .option("type", "order").load()
    )  # fmt: skip
    assert typed.columns[-3:] == ["published_at", "ver", "partition"]
    rows = typed.collect()
    check_rows_name_their_partitions(rows, published)
    assert all(published[row.id] == row.customer for row in rows)


@pytest.mark.anyio
async def test_streaming_restart_is_exact_and_the_group_follows_each_partition(
    spark: Any, redis_url: str, topic: str, tmp_path: Path
) -> None:
    published = await publish_orders(redis_url, topic, 30)
    reader = stream_reader(spark, redis_url, topic, group="spark-archive", maxRecordsPerBatch="7")
    query = run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    if admission_control():
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes == [7, 7, 7, 7, 2], f"micro-batch sizes over all partitions: {sizes}"
    check_rows_name_their_partitions(spark.read.parquet(str(tmp_path / "out")).collect(), published)
    checkpointed = last_checkpointed_offset(tmp_path / "ckpt")
    assert sorted(checkpointed) == [str(i) for i in range(PARTS)], checkpointed
    if admission_control():  # pyspark < 4.2: the group trails by the run's last batch
        for position, last in group_positions(redis_url, topic, "spark-archive"):
            assert last is None or position == last, "each partition's group at its end"

    published |= await publish_orders(redis_url, topic, 13, start=30)
    run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len(out) == 43, "a restarted query must read exactly the new entries"
    check_rows_name_their_partitions(out, published)
    async with MessageQueue(redis_url, stream=topic, group="services", partitions=PARTS) as mq:
        group = (await mq.topic_info()).group("spark-archive")
    assert group.pending == 0, "Spark must not hold entries in the group's pending list"
    if admission_control():
        assert group.lag == 0, "the pipeline's group must count no unread entry"


@pytest.mark.anyio
async def test_write_by_key_puts_each_row_in_its_key_partition_in_order(
    spark: Any, redis_url: str, topic: str
) -> None:
    async with MessageQueue(redis_url, stream=topic, group="services", partitions=PARTS):
        pass  # records the topic's partitions
    rows = [(f"o{i:03}", CUSTOMERS[i % 5], Decimal(i)) for i in range(40)]
    df = spark.createDataFrame(rows, "order_id string, customer string, amount decimal(10,2)")
    df.coalesce(1).write.format("streamq").option("url", redis_url).option("stream", topic).option(
        "type", "order"
    ).option("keyColumn", "customer").mode("append").save()
    written: dict[str, list[str]] = {}
    for index, stream in enumerate(partition_streams(topic, PARTS)):
        for _, data in entries(redis_url, stream):
            customer = data["customer"]
            assert partition_for_key(customer, PARTS) == index, f"{customer} in partition {index}"
            written.setdefault(customer, []).append(data["order_id"])
    assert sum(map(len, written.values())) == 40
    for customer, order_ids in written.items():
        assert order_ids == [r[0] for r in rows if r[1] == customer], f"{customer}: out of order"


def test_write_without_key_spreads_rows_and_topic_partitions_records_the_topic(
    spark: Any, redis_url: str, topic: str, stream: str
) -> None:
    df = spark.createDataFrame([(f"n{i}", i) for i in range(8)], "note string, n int").coalesce(1)

    def write(target: str, **options: str) -> None:
        writer = df.write.format("streamq").option("url", redis_url).option("stream", target)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.option("type", "note").mode("append").save()

    write(topic, topicPartitions=str(PARTS))
    with connect_sync(redis_url).client_for(topic, owner=True) as client:
        assert client.hget(Keys(topic).partitions, "count") == str(PARTS).encode()
    lengths = [len(entries(redis_url, s)) for s in partition_streams(topic, PARTS)]
    assert lengths == [2] * PARTS, f"rows without a key must take the partitions in turn: {lengths}"
    with pytest.raises(Exception, match=rf"topicPartitions.*has {PARTS} partitions"):
        write(topic, topicPartitions="3")
    write(stream)  # a plain stream, as always
    with pytest.raises(Exception, match="is a plain stream"):
        write(stream, topicPartitions=str(PARTS))
    with pytest.raises(Exception, match=r"keyColumn 'n' is int.*cast"):
        write(topic, keyColumn="n")


@pytest.mark.anyio
async def test_a_dataframe_defined_before_the_topic_was_partitioned_is_refused(
    spark: Any, redis_url: str, topic: str, tmp_path: Path
) -> None:
    early = stream_reader(spark, redis_url, topic)  # nothing there yet: a plain stream
    early_df = early.load()
    assert "partition" not in early_df.columns
    await publish_orders(redis_url, topic, 3)
    query = start_available_now(early_df, tmp_path / "ckpt", tmp_path / "o")
    with pytest.raises(Exception, match=r"has 4 partitions.*load\(\) it again"):
        query.awaitTermination(120)
    run_available_now(early, tmp_path / "ckpt2", tmp_path / "out")  # loaded again: fine
    assert spark.read.parquet(str(tmp_path / "out")).count() == 3


@pytest.mark.anyio
async def test_the_reader_driven_as_pyspark_40_drives_it(redis_url: str, topic: str) -> None:
    """pyspark 4.0/4.1 call latestOffset() without a start or a limit: the source applies
    maxRecordsPerBatch itself from the end it planned last (no SparkSession needed)."""
    from streamq.spark.options import ReadOptions
    from streamq.spark.reading import StreamqStreamReader

    published = await publish_orders(redis_url, topic, 30)
    options = {"url": redis_url, "stream": topic, "maxRecordsPerBatch": "7", "group": "old"}
    reader = StreamqStreamReader(ReadOptions.parse(options, {}), SparkTopic(topic, PARTS))
    start, sizes, ids = reader.initialOffset(), [], []
    try:
        while (end := reader.latestOffset()) != start:
            batch = [
                i
                for part in reader.partitions(start, end)
                for rows in reader.read(part)
                for i in rows.column("id").to_pylist()
            ]
            sizes.append(len(batch))
            ids += batch
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    assert sizes == [7, 7, 7, 7, 2], f"micro-batch sizes {sizes}"
    assert sorted(ids) == sorted(published), "every entry exactly once"
    for position, last in group_positions(redis_url, topic, "old"):
        assert last is None or position == last, "each partition's group at its end"


def batch_ids(reader: Any, start: Any, end: Any) -> list[str]:
    """The entry IDs of the micro-batch ``(start, end]`` as ``reader`` plans and reads it."""
    return [
        i
        for part in reader.partitions(start, end)
        for rows in reader.read(part)
        for i in rows.column("id").to_pylist()
    ]


@pytest.mark.anyio
async def test_a_reader_restarted_as_pyspark_40_restarts_it_reads_all_available(
    redis_url: str, topic: str
) -> None:
    """pyspark 4.0/4.1 restart a query with a fresh reader that first plans the
    checkpoint's last batch again, empty (``partitions(end, end)``), then asks
    ``latestOffset()``: under Trigger.AvailableNow that answer is the run's target, so it is
    all that is available, not one maxRecordsPerBatch batch. Later batches are limited."""
    from streamq.spark.options import ReadOptions
    from streamq.spark.reading import StreamqStreamReader

    def new_reader(**options: str) -> StreamqStreamReader:
        options |= {"url": redis_url, "stream": topic, "group": "old"}
        return StreamqStreamReader(ReadOptions.parse(options, {}), SparkTopic(topic, PARTS))

    await publish_orders(redis_url, topic, 30)
    first = new_reader()
    start = first.initialOffset()
    checkpointed = first.latestOffset()
    assert len(batch_ids(first, start, checkpointed)) == 30
    first.commit(checkpointed)
    first.stop()

    added = await publish_orders(redis_url, topic, 13, start=30)
    restarted = new_reader(maxRecordsPerBatch="7")
    try:
        assert batch_ids(restarted, checkpointed, checkpointed) == []  # the replay, empty
        target = restarted.latestOffset()
        assert sorted(batch_ids(restarted, checkpointed, target)) == sorted(added)
        restarted.commit(target)
        await publish_orders(redis_url, topic, 10, start=43)
        assert len(batch_ids(restarted, target, restarted.latestOffset())) == 7, "limited again"
    finally:
        restarted.stop()


def test_a_checkpoint_of_the_other_kind_is_refused() -> None:
    plain, parted = SparkTopic("t", 1), SparkTopic("t", PARTS)
    ends = [{"id": f"{i}-0", "n": i} for i in range(PARTS)]
    assert parted.decode(parted.encode(ends)) == ends
    assert plain.decode(plain.encode(ends[:1])) == ends[:1] == [{"id": "0-0", "n": 0}]
    with pytest.raises(ConfigError, match=r"plain stream.*new checkpointLocation"):
        parted.decode({"id": "5-0"})
    with pytest.raises(ConfigError, match=r"partitioned topic.*new checkpointLocation"):
        plain.decode(parted.encode(ends))
    with pytest.raises(ConfigError, match=r"3 partitions.*has 4"):
        parted.decode(SparkTopic("t", 3).encode(ends[:3]))


@pytest.mark.slow
@pytest.mark.anyio
async def test_partitioned_read_and_keyed_write_on_the_cluster(
    spark: Any, streamq_cluster_url: str, tmp_path: Path
) -> None:
    url, topic = streamq_cluster_url, f"test-{uuid.uuid4().hex[:12]}"
    try:
        published = await publish_orders(url, topic, 20)
        reader = stream_reader(spark, url, topic, group="spark-archive")
        run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
        check_rows_name_their_partitions(
            spark.read.parquet(str(tmp_path / "out")).collect(), published
        )
        if admission_control():
            for position, last in group_positions(url, topic, "spark-archive"):
                assert last is None or position == last, "each partition's group at its end"
        rows = [(f"w{i}", CUSTOMERS[i % 3], Decimal(1)) for i in range(12)]
        df = spark.createDataFrame(rows, "order_id string, customer string, amount decimal")
        df.write.format("streamq").option("url", url).option("stream", topic).option(
            "type", "order"
        ).option("keyColumn", "customer").mode("append").save()
        written = 0
        for index, stream in enumerate(partition_streams(topic, PARTS)):
            for _, data in entries(url, stream):
                if data["order_id"].startswith("w"):
                    assert partition_for_key(data["customer"], PARTS) == index, data
                    written += 1
        assert written == 12
        run_available_now(reader, tmp_path / "ckpt", tmp_path / "out")
        assert spark.read.parquet(str(tmp_path / "out")).count() == 32
        async with MessageQueue(url, stream=topic, group="services", partitions=PARTS) as mq:
            nodes = {mq._topic.node_of(s) for s in partition_streams(topic, PARTS)}
        assert len(nodes) > 1, "the partitions should spread over the cluster's masters"
    finally:
        forget(url, topic)


@pytest.mark.anyio
async def test_a_topic_with_priorities_is_read_from_every_level_and_written_to_the_default(
    spark: Any, redis_url: str
) -> None:
    name = f"test-{uuid.uuid4().hex[:12]}"
    try:
        async with MessageQueue(redis_url, stream=name, group="services", priorities=3) as mq:
            ids = [await mq.publish("note", {"n": n}, priority=n % 3) for n in range(6)]
            order = Order(order_id="o1", customer="c", amount=Decimal(1))
            ordered = await mq.publish("order", order, priority=0)
            streams = mq.streams
        df = spark.read.format("streamq").option("url", redis_url).option("stream", name).load()
        assert df.columns[-2:] == ["partition", "priority"]
        read = {row.id: (row.partition, row.priority) for row in df.collect()}
        levels = {i: (0, n % 3) for n, i in enumerate(ids)}
        assert read == {**levels, ordered: (0, 0)}, "each row's partition and level"
        streamq.spark.register(spark, models={"order": Order})
        typed = (spark.read.format("streamq").option("url", redis_url).option("stream", name)
                 .option("type", "order").load())  # fmt: skip
        assert typed.columns[-3:] == ["ver", "partition", "priority"]
        assert [(r.id, r.customer, r.partition, r.priority) for r in typed.collect()] == [
            (ordered, "c", 0, 0)
        ]
        rows = spark.createDataFrame([("note", '{"n": 9}')], ["type", "data"])
        rows.write.format("streamq").mode("append").option("url", redis_url).option(
            "stream", name
        ).save()
        lengths = [len(entries(redis_url, stream)) for stream in streams]
        assert lengths == [3, 3, 2], "written to the default level (1), read from all"
        assert SparkTopic(name, 1, 3).streams == streams
    finally:
        for stream in topic_streams(name, 1, 3):
            delete_stream_keys(redis_url, stream)
