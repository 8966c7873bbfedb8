"""A queue that publishes without being opened checks the topic's shape at its first
publish, as ``open()`` does: a plain queue's publish to a partitioned topic went to the plain
stream of the topic's name, which no consumer of the topic reads (lost), and a partitioned
queue's publish to a plain stream spread it over partition streams nobody reads."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from streamq import ConfigError, MessageQueue
from streamq.testing import delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect_sync

pytestmark = pytest.mark.anyio


def entries_in(url: str, stream: str) -> int:
    deployment = connect_sync(url)
    try:
        return int(deployment.client_for(stream).xlen(stream))
    finally:
        deployment.close()


@pytest.fixture
def topic(redis_url: str) -> Iterator[str]:
    name = f"test-{os.urandom(5).hex()}"
    yield name
    for stream in (*partition_streams(name, 4), name):
        delete_stream_keys(redis_url, stream)


async def test_an_unopened_plain_queue_does_not_publish_to_a_partitioned_topic(
    redis_url: str, topic: str
) -> None:
    async with MessageQueue(redis_url, stream=topic, partitions=4) as partitioned:
        await partitioned.publish("job", 1)
    plain = MessageQueue(redis_url, stream=topic)  # never opened
    try:
        with pytest.raises(ConfigError, match="has 4 partitions"):
            await plain.publish("job", 2)
        with pytest.raises(ConfigError, match="has 4 partitions"):
            await plain.publish_many("job", [3, 4])
    finally:
        await plain.aclose()
    assert entries_in(redis_url, topic) == 0, "a publish went to the plain stream"


async def test_an_unopened_partitioned_queue_does_not_publish_to_a_plain_stream(
    redis_url: str, topic: str
) -> None:
    async with MessageQueue(redis_url, stream=topic) as plain:
        await plain.publish("job", 1)
    partitioned = MessageQueue(redis_url, stream=topic, partitions=4)
    try:
        with pytest.raises(ConfigError, match="is a plain stream"):
            await partitioned.publish("job", 2)
    finally:
        await partitioned.aclose()
    for stream in partition_streams(topic, 4):
        assert entries_in(redis_url, stream) == 0


async def test_an_unopened_queue_records_a_new_topic_and_publishes_once_checked(
    redis_url: str, topic: str
) -> None:
    first = MessageQueue(redis_url, stream=topic, partitions=4)
    try:
        ids = [await first.publish("job", n, key=f"k{n}") for n in range(8)]
    finally:
        await first.aclose()
    assert all(":" in entry_id for entry_id in ids)
    with pytest.raises(ConfigError, match="has 4 partitions"):
        await MessageQueue(redis_url, stream=topic).open()  # the first publish recorded it
