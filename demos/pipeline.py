"""`make demo-pipeline`: the data pipeline on the same stream the services consume.

1. Services publish emails and orders; the handlers consume them (group "services").
2. A Spark Structured Streaming query (availableNow) archives the stream to Parquet,
   partitioned by type and date, through its own group "spark-archive".
3. Cleanup removes only what was both archived and acknowledged.
4. A Spark batch job reads the archive, counts orders per customer and writes follow-up
   `email` messages to the stream with the writer; the email handler sends them.
"""

from __future__ import annotations

import shutil
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from demos._common import fresh_stream, run, setup_logging
from handlers.email_handler import Email, install
from handlers.order_handler import Order, OrderHandler
from streamq import CleanupPolicy, MessageQueue, StartFrom
from streamq.server import default_url


def spark_session() -> Any:
    import streamq.spark

    return streamq.spark.local_session(
        app_name="streamq-pipeline", **{"spark.sql.shuffle.partitions": "2"}
    )


def archive(spark: Any, url: str, stream: str, root: Path) -> int:
    """Step 2: availableNow query -> Parquet partitioned by type and date."""
    from pyspark.sql import functions as F

    entries = (
        spark.readStream.format("streamq").option("url", url).option("stream", stream)
        .option("group", "spark-archive").option("startingOffsets", "earliest").load()
        .withColumn("date", F.to_date("published_at"))
    )  # fmt: skip
    query = (
        entries.writeStream.format("parquet").partitionBy("type", "date")
        .option("path", str(root / "archive")).option("checkpointLocation", str(root / "ckpt"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    return int(spark.read.parquet(str(root / "archive")).count())


def follow_up(spark: Any, url: str, stream: str, root: Path) -> list[tuple[str, int, str]]:
    """Step 4: orders per customer from the archive -> one follow-up email each."""
    from pyspark.sql import functions as F

    orders = spark.read.parquet(str(root / "archive")).where(F.col("type") == "order")
    parsed = orders.select(F.from_json("data", "customer string, amount decimal(12,2)").alias("o"))
    per_customer = parsed.groupBy("o.customer").agg(
        F.count("*").alias("orders"), F.sum("o.amount").alias("total")
    )
    emails = per_customer.select(
        F.concat(F.col("customer"), F.lit("@example.com")).alias("to"),
        F.concat(F.lit("Your "), F.col("orders"), F.lit(" orders")).alias("subject"),
        F.concat(F.lit("total "), F.col("total").cast("string")).alias("body"),
    )
    emails.write.format("streamq").option("url", url).option("stream", stream).option(
        "type", "email"
    ).mode("append").save()
    return [
        (r.customer, r.orders, str(r.total)) for r in per_customer.orderBy("customer").collect()
    ]


async def main() -> None:
    setup_logging()
    url, stream = default_url(), fresh_stream("pipeline")
    root = Path(tempfile.mkdtemp(prefix="streamq-pipeline-"))
    policy = CleanupPolicy(max_stream_length=0, min_retention=0)
    mq = MessageQueue(
        url, stream=stream, group="services", start=StartFrom.EARLIEST, cleanup=policy
    )
    outbox: list[Email] = []
    install(mq, outbox)
    orders = OrderHandler()
    mq.register(orders)
    print(f"pipeline demo on {url}, stream {stream!r}")
    spark = await anyio.to_thread.run_sync(spark_session)
    try:
        async with mq, anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            print("1. services publish and consume:")
            await mq.publish("email", Email(to="ada@example.com", subject="Welcome"))
            await mq.publish_many("order", [
                Order(order_id=f"o-{i}", customer=("ada", "bob", "cy")[i % 3], amount=Decimal(5 * i))
                for i in range(1, 10)
            ])  # fmt: skip
            with anyio.fail_after(30):
                while len(orders.handled) < 9 or len(outbox) < 1:
                    await anyio.sleep(0.05)
            archived = await anyio.to_thread.run_sync(archive, spark, url, stream, root)
            print(f"2. Spark archived {archived} entries to {root / 'archive'} (by type and date)")
            before = (await mq.topic_info()).length
            removed = await mq.cleanup()
            info = await mq.topic_info()
            spark_group = info.group("spark-archive")
            print(f"3. cleanup removed {removed} of {before} entries: archived and acknowledged by "
                  f"both groups (spark-archive at {spark_group.last_delivered_id}, lag {spark_group.lag})")  # fmt: skip
            totals = await anyio.to_thread.run_sync(follow_up, spark, url, stream, root)
            print("4. Spark batch job: orders per customer -> follow-up emails:")
            for customer, count, total in totals:
                print(f"     {customer:<4} {count} orders, total {total}")
            with anyio.fail_after(30):
                while len(outbox) < 1 + len(totals):
                    await anyio.sleep(0.05)
            await mq.stop()
        print(f"done: {len(outbox)} emails sent ({len(totals)} follow-ups); stop: {mq.stop_reason}")
        await MessageQueue(url, stream=stream).terminate_topic()
    finally:
        await anyio.to_thread.run_sync(spark.stop)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run(main)
