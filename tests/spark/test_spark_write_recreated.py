"""A Spark write outlives its topic: the topic is terminated under it, perhaps re-created
with another partition count.

A write finds the topic's shape (its partition streams) once, on the driver, for all its
tasks (a streaming query: for each micro-batch). Before, rows written after a terminate went
on into the streams of that shape, created anew, which no consumer of a re-created topic
reads: lost, with no error.
Rows are now added with ``XADD ... NOMKSTREAM``; rows whose stream was missing are sent
again once the topic's record is found to still fit the write, which fails otherwise.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import streamq.spark
from streamq import ConfigError, MessageQueue
from streamq.spark.options import WriteOptions
from streamq.spark.topic import SparkTopic
from streamq.spark.writing import WrittenCount, write_arrow, write_rows
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams, recorded_partitions_sync
from streamq.wire.client import connect_sync
from tests.helpers.recreated import lengths, recreate, unread

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

ROWS = 25


def write(url: str, topic: SparkTopic, path: str, first: int = 0) -> WrittenCount:
    """Rows ``first``.. ``first + ROWS - 1`` (column ``n``) written to ``topic`` as a task
    does, in chunks of 10, by the Arrow path or the row path."""
    opts = WriteOptions.parse({"url": url, "stream": topic.name, "type": "job", "chunk": "10"})
    numbers = list(range(first, first + ROWS))
    if path == "arrow":
        batch = pa.RecordBatch.from_pydict({"n": numbers})
        return write_arrow(opts, ["n"], "job1", iter([batch]), topic)
    return write_rows(opts, ["n"], "job1", iter([(n,) for n in numbers]), topic)


def published(url: str, streams: tuple[str, ...]) -> Counter[int]:
    deployment = connect_sync(url)
    try:
        return Counter(
            json.loads(fields[b"data"])["n"]
            for s in streams
            for _, fields in deployment.client_for(s).xrange(s)
        )
    finally:
        deployment.close()


def recorded(url: str, topic: str) -> int | None:
    deployment = connect_sync(url)
    try:
        return recorded_partitions_sync(deployment.client_for(topic), topic)
    finally:
        deployment.close()


@pytest.mark.parametrize("path", ["arrow", "rows"])
@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.anyio
async def test_a_topic_terminated_under_a_write_gets_every_row_once_and_its_record_back(
    where: str, topic: str, path: str, partitions: int
) -> None:
    """Also the first write to a new topic: its streams do not exist yet."""
    shape = SparkTopic(topic, partitions)
    assert write(where, shape, path).rows == ROWS  # a new topic: streams made on the way
    assert published(where, shape.streams) == Counter(range(ROWS)), "rows lost or sent twice"
    async with MessageQueue(where, stream=topic, partitions=partitions, group="g") as mq:
        await mq.terminate_topic()
    assert write(where, shape, path, first=ROWS).rows == ROWS
    assert published(where, shape.streams) == Counter(range(ROWS, 2 * ROWS))
    assert recorded(where, topic) == (partitions if partitions > 1 else None), (
        "a partitioned topic written again after a terminate must be recorded again"
    )


@pytest.mark.parametrize("path", ["arrow", "rows"])
@pytest.mark.parametrize(("old", "new"), [(1, 2), (4, 2)])
@pytest.mark.anyio
async def test_a_write_planned_before_the_topic_came_back_otherwise_fails_and_adds_nothing(
    where: str, topic: str, path: str, old: int, new: int
) -> None:
    shape = SparkTopic(topic, old)
    write(where, shape, path)
    consumers = await recreate(where, topic, old, new)
    try:
        with pytest.raises(ConfigError, match=rf"changed under this write.*has {new} partitions"):
            write(where, shape, path, first=ROWS)
    finally:
        await consumers.aclose()
    stale = unread(where, topic, old, new) if old > 1 else lengths(where, [topic])
    assert not any(stale.values()), f"rows went where no consumer reads: {stale}"


@pytest.fixture
def source(where: str) -> Iterator[str]:
    name = f"test-src-{os.urandom(5).hex()}"
    yield name
    delete_stream_keys(where, name)


@pytest.mark.anyio
async def test_a_streaming_write_follows_its_topic_re_created_between_micro_batches(
    spark: Any, where: str, topic: str, source: str, tmp_path: Path
) -> None:
    """A streaming query copying ``source`` into ``topic``; the topic is terminated and
    re-created with 2 partitions between two micro-batches. Each micro-batch's writer finds
    the topic anew (pyspark 4.3 makes one per micro-batch), so the second goes into the
    new partitions and nothing into the old stream (within a micro-batch, the tests above)."""
    streamq.spark.register(spark)
    rows = spark.readStream.format("streamq").option("url", where).option("stream", source)
    query = (
        rows.load().select("type", "data").writeStream.format("streamq")
        .option("url", where).option("stream", topic).option("dataColumn", "data")
        .option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    )  # fmt: skip
    try:
        async with MessageQueue(where, stream=source) as producer:
            await producer.publish_many("job", [{"n": n} for n in range(5)])
            query.processAllAvailable()
            assert published(where, (topic,)) == Counter(range(5))
            consumers = await recreate(where, topic, old=1, new=2)
            try:
                await producer.publish_many("job", [{"n": n} for n in range(5, 10)])
                query.processAllAvailable()
            finally:
                await consumers.aclose()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert lengths(where, [topic]) == {topic: 0}, "rows went into the terminated stream"
    assert published(where, partition_streams(topic, 2)) == Counter(range(5, 10))
