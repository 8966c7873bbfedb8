"""Writes to a topic with priorities: each row goes to the level of option ``priority`` or
of its ``priorityColumn`` value (a null: the default level), on every partition; rows read
from such a topic and written back keep their level; levels the topic does not have are
clear errors. The routing of Arrow batches is checked against the row path without Spark."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow", reason="the Arrow writer needs the [spark] extra")

from streamq import MessageQueue  # noqa: E402
from streamq.errors import ConfigError  # noqa: E402
from streamq.spark.options import WriteOptions  # noqa: E402
from streamq.spark.routing import RowRouter  # noqa: E402
from streamq.spark.topic import SparkTopic  # noqa: E402
from streamq.spark.writing import RowEncoder, write_arrow, write_rows  # noqa: E402
from streamq.testing import delete_stream_keys  # noqa: E402
from streamq.wire.partition_names import partition_for_key, topic_streams  # noqa: E402
from tests.helpers.clients import sync_client  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

PARTS, LEVELS = 2, 3


def write_options(**options: str) -> WriteOptions:
    return WriteOptions.parse({"url": "redis://unused", "stream": "t", "type": "note", **options})


def entries(url: str, stream: str) -> list[dict[str, Any]]:
    """The data of every entry of one stream, in stream order."""
    with sync_client(url, stream) as client:
        return [json.loads(fields[b"data"]) for _, fields in client.xrange(stream)]


@pytest.fixture
def topics(redis_url: str) -> Iterator[Callable[[], str]]:
    """Names of fresh topics (of up to PARTS partitions and LEVELS levels), deleted after."""
    made: list[str] = []

    def fresh() -> str:
        made.append(f"test-{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield fresh
    for name in made:
        for stream in {*topic_streams(name, PARTS, LEVELS), *topic_streams(name, 1, LEVELS)}:
            delete_stream_keys(redis_url, stream)


async def open_topic(url: str, name: str, partitions: int = PARTS) -> tuple[str, ...]:
    """Record ``name`` with ``partitions`` partitions and LEVELS levels; its streams."""
    async with MessageQueue(url, stream=name, group="services", partitions=partitions,
                            priorities=LEVELS) as mq:  # fmt: skip
        return mq.streams


# -- routing, without Spark ------------------------------------------------------------

BATCH = pa.RecordBatch.from_pydict({
    "n": list(range(12)),
    "customer": [f"c{n % 5}" for n in range(12)],
    "level": pa.array([0, 2, None, 1, 2, 0, None, 2, 2, 1, 0, None], pa.int8()),
})  # fmt: skip


@pytest.mark.parametrize("partitions", [1, PARTS, 5])
@pytest.mark.parametrize(
    "options",
    [{}, {"priority": "0"}, {"priorityColumn": "level"},
     {"priorityColumn": "level", "priority": "2"}, {"priorityColumn": "level", "keyColumn": "customer"}],
)  # fmt: skip
def test_arrow_batches_go_where_the_row_path_sends_each_row(
    partitions: int, options: dict[str, str]
) -> None:
    opts = write_options(**options)
    topic = SparkTopic("t", partitions, LEVELS)
    columns = BATCH.schema.names
    router = RowRouter(opts, columns, topic, task=3)
    first = 40
    expected: dict[int, list[int]] = {}
    for n, row in enumerate(zip(*(c.to_pylist() for c in BATCH.columns), strict=True)):
        expected.setdefault(router.of_row(row, first + n), []).append(first + n)
    split = {
        at: (rows.column(0).to_pylist(), numbers.to_pylist())
        for at, rows, numbers in router.split(BATCH, first)
    }
    assert {at: numbers for at, (_, numbers) in split.items()} == expected
    assert all([n + first for n in ns] == numbers for ns, numbers in split.values())
    levels = {at // partitions for at in split}
    if "priorityColumn" in options:
        fallback = int(options.get("priority", LEVELS // 2))
        for at, (ns, _) in split.items():
            assert all(BATCH.column(2)[n].as_py() in (at // partitions, None) for n in ns)
            nulls = [n for n in ns if BATCH.column(2)[n].as_py() is None]
            assert not nulls or at // partitions == fallback
        assert levels == {0, 1, 2}
    else:
        assert levels == {int(options.get("priority", LEVELS // 2))}
    if "keyColumn" in options:
        for at, (ns, _) in split.items():
            assert {partition_for_key(f"c{n % 5}", partitions) for n in ns} == {at % partitions}


def test_the_priority_column_is_not_part_of_the_payload() -> None:
    encoder = RowEncoder(write_options(priorityColumn="level"), BATCH.schema.names)
    assert encoder.payload_columns == ["n", "customer"]
    assert RowEncoder(write_options(), BATCH.schema.names).payload_columns == [
        "n", "customer", "level"
    ]  # fmt: skip


@pytest.mark.parametrize("value", [7, -1])
def test_a_level_the_topic_does_not_have_names_the_row(value: int) -> None:
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3], "level": [0, None, value]})
    router = RowRouter(write_options(priorityColumn="level"), ["n", "level"],
                       SparkTopic("t", PARTS, LEVELS), task=0)  # fmt: skip
    said = rf"priorityColumn .level. holds {value} \(row 12 of this Spark task\).*to 2 \(lowest"
    with pytest.raises(ConfigError, match=said):
        list(router.split(batch, 10))
    with pytest.raises(ConfigError, match=said):
        router.of_row((3, value), 12)


@pytest.mark.parametrize("path", ["rows", "arrow"])
def test_a_task_sent_twice_adds_each_row_once_at_its_level(
    redis_url: str, topics: Callable[[], str], path: str
) -> None:
    """The idempotent write path (the fallback script on Valkey, IDMP on Redis >= 8.6)
    with rows spread over every level of every partition, sent a second time (a retry)."""
    name = topics()
    topic = SparkTopic(name, PARTS, LEVELS)
    opts = WriteOptions.parse({"url": redis_url, "stream": name, "type": "job", "chunk": "7",
                               "idempotent": "true", "priorityColumn": "level"})  # fmt: skip
    rows = [(n, n % LEVELS) for n in range(90)]
    for _ in range(2):
        if path == "rows":
            written = write_rows(opts, ["n", "level"], "job1", iter(rows), topic)
        else:
            batch = pa.RecordBatch.from_pylist([{"n": n, "level": lv} for n, lv in rows])
            written = write_arrow(opts, ["n", "level"], "job1", iter([batch]), topic)
        assert written.rows == len(rows)
    for index, stream in enumerate(topic.streams):
        level = index // PARTS
        numbers = [data["n"] for data in entries(redis_url, stream)]
        assert numbers, f"level {level} of partition {index % PARTS} got no row"
        assert all(n % LEVELS == level for n in numbers), f"{stream}: {numbers}"
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    total = sum(len(entries(redis_url, s)) for s in topic.streams)
    assert total == len(rows), "each row once"


# -- through Spark ----------------------------------------------------------------------


def save(df: Any, url: str, stream: str, **options: str) -> None:
    writer = df.write.format("streamq").option("url", url).option("stream", stream)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


@pytest.mark.anyio
async def test_rows_go_to_the_level_of_the_option_or_of_their_column(
    spark: Any, redis_url: str, topics: Callable[[], str]
) -> None:
    name = topics()
    streams = await open_topic(redis_url, name)
    rows = [(n, [0, 2, None][n % 3]) for n in range(12)]
    df = spark.createDataFrame(rows, "n int, level int").coalesce(1)
    save(df, redis_url, name, type="note", priorityColumn="level")
    save(df.select("n"), redis_url, name, type="note", priority="0")
    save(df, redis_url, name, type="note", priorityColumn="level", priority="2")
    written = {index: entries(redis_url, stream) for index, stream in enumerate(streams)}
    assert all(set(data) == {"n"} for datas in written.values() for data in datas), (
        "the priority column is not part of the payload"
    )
    per_level = [sorted(d["n"] for i in range(PARTS) for d in written[lv * PARTS + i])
                 for lv in range(LEVELS)]  # fmt: skip
    zeros, twos, nulls = ([n for n, level in rows if level == want] for want in (0, 2, None))
    assert per_level[0] == sorted(zeros + list(range(12)) + zeros)
    assert per_level[1] == sorted(nulls), "a null takes the default level"
    assert per_level[2] == sorted(twos + twos + nulls), "or the level of option priority"
    assert all(written[index] for index in range(len(streams)) if index // PARTS != 1)


async def publish_notes(url: str, name: str, count: int) -> Counter[tuple[str, int]]:
    """Publish ``count`` notes over every level and partition of ``name``; (data, level)
    of each."""
    async with MessageQueue(url, stream=name, group="services", partitions=PARTS,
                            priorities=LEVELS) as mq:  # fmt: skip
        for n in range(count):
            await mq.publish("note", {"n": n}, key=f"k{n}", priority=n % LEVELS)
    return Counter((json.dumps({"n": n}, separators=(",", ":")), n % LEVELS) for n in range(count))


def levels_read(spark: Any, url: str, name: str) -> Counter[tuple[str, int]]:
    df = spark.read.format("streamq").option("url", url).option("stream", name).load()
    return Counter((row.data, row.priority) for row in df.collect())


@pytest.mark.anyio
async def test_rows_read_and_written_back_keep_their_level(
    spark: Any, redis_url: str, topics: Callable[[], str]
) -> None:
    source, target = topics(), topics()
    published = await publish_notes(redis_url, source, 30)
    await open_topic(redis_url, target)
    df = spark.read.format("streamq").option("url", redis_url).option("stream", source).load()
    assert levels_read(spark, redis_url, source) == published
    save(df, redis_url, target, dataColumn="data", priorityColumn="priority")
    assert levels_read(spark, redis_url, target) == published


@pytest.mark.anyio
async def test_a_streaming_write_keeps_each_rows_level(
    spark: Any, redis_url: str, topics: Callable[[], str], tmp_path: Path
) -> None:
    source, target = topics(), topics()
    published = await publish_notes(redis_url, source, 24)
    await open_topic(redis_url, target, partitions=1)
    frame = (spark.readStream.format("streamq").option("url", redis_url)
             .option("stream", source).load())  # fmt: skip
    query = (
        frame.writeStream.format("streamq").option("url", redis_url).option("stream", target)
        .option("dataColumn", "data").option("priorityColumn", "priority")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert levels_read(spark, redis_url, target) == published


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"priority": "3"}, r"option 'priority': priority must be between 0 \(highest\) and 2"),
        ({"priority": "-1"}, r"option 'priority': priority must be between 0 \(highest\) and 2"),
        ({"priority": "high"}, "option 'priority' must be an integer"),
        ({"priorityColumn": "name"}, r"priorityColumn 'name' is string.*cast\('int'\)"),
        ({"priorityColumn": "nope"}, "priorityColumn 'nope' is not a column"),
        ({"priorityColumn": "level"}, r"priorityColumn 'level' holds 5 \(row 1 of this Spark"),
    ],
)
async def test_levels_the_topic_does_not_have_are_clear_errors(
    spark: Any, redis_url: str, topics: Callable[[], str], options: dict[str, str], said: str
) -> None:
    name = topics()
    streams = await open_topic(redis_url, name)
    df = spark.createDataFrame([("a", 1), ("b", 5)], "name string, level int").coalesce(1)
    with pytest.raises(Exception, match=said):
        save(df, redis_url, name, type="note", **options)
    if "holds" not in said:  # refused on the driver: nothing written
        assert not any(entries(redis_url, stream) for stream in streams)


@pytest.mark.parametrize("option", [("priority", "0"), ("priorityColumn", "level")])
def test_priority_options_on_a_topic_without_priorities_are_refused(
    spark: Any, redis_url: str, stream: str, r: Any, option: tuple[str, str]
) -> None:
    df = spark.createDataFrame([(1, 0)], "n int, level int")
    with pytest.raises(Exception, match=rf"option '{option[0]}', but topic .* has no priorities"):
        save(df, redis_url, stream, type="note", **dict([option]))
    assert r.xlen(stream) == 0
