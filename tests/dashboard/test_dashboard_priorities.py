"""The dashboard and topics with priorities: a topic's level streams (``<name>:q<L>``) are
listed as one topic with the totals of every level, its partition count and its number of
levels; a stream merely named like a level is a topic of its own."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq import MessageQueue, StartFrom
from streamq.testing import delete_stream_keys
from streamq.wire.partition_names import topic_streams
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import in_own_thread, row_starting, table

Web = httpx.Client
NODE = r"127\.0\.0\.1:\d+"


@pytest.fixture
def topic(redis_url: str) -> Iterator[str]:
    """A topic name; every stream of the shapes used here, their keys and records go after."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    for partitions in (1, 2):
        for stream in (*topic_streams(name, partitions, 3), name):
            delete_stream_keys(redis_url, stream)


def topic_with_levels(url: str, topic: str, partitions: int = 1) -> None:
    """``topic`` with 3 levels and group ``billing``: one entry at level 0, two at the
    default level 1, three at level 2 (on every partition in turn)."""

    async def run() -> None:
        mq = MessageQueue(
            url, stream=topic, group="billing", consumer="c1", start=StartFrom.EARLIEST,
            partitions=partitions, priorities=3,
        )  # fmt: skip
        async with mq:
            await mq.publish("job", 0, priority=0)
            await mq.publish_many("job", [1, 1])
            await mq.publish_many("job", [2, 2, 2], priority=2)

    in_own_thread(run)


def test_a_topic_with_priorities_is_listed_once_with_every_level(
    web: Web, redis_url: str, topic: str
) -> None:
    topic_with_levels(redis_url, topic)
    split = f"{topic}-split"
    topic_with_levels(redis_url, split, partitions=2)
    decoy = f"{topic}:q7"  # named like a level, but the topic records 3
    with sync_client(redis_url, decoy) as other:
        other.xgroup_create(decoy, "g", id="$", mkstream=True)
        try:
            page = web.get("/").text
        finally:
            other.delete(decoy)
    header = table(page, "topics")[0]
    assert header[7:] == ["Partitions", "Levels", "Nodes"]
    names = [row[0] for row in table(page, "topics")[1:]]
    assert names.count(topic) == 1 and names.count(split) == 1
    assert decoy in names, "a stream merely named like a level is not listed"
    # this test's own names only: the server is shared with tests running beside it
    levels = [n for n in names if n.startswith(topic) and n != decoy and re.search(r":q\d$", n)]
    assert not levels, f"level streams listed as topics: {levels}"
    # 6 entries over 3 levels, none read: lag 6
    assert row_starting(page, "topics", topic)[1:9] == ["6", "1", "6", "0", "0", "0", "1", "3"]
    row = row_starting(page, "topics", split)
    assert row[1:9] == ["6", "1", "6", "0", "0", "0", "2", "3"]
    assert re.fullmatch(rf"{NODE}(, {NODE})*", row[9]), f"nodes: {row[9]!r}"


def test_a_topic_page_has_a_row_per_stream_with_its_partition_and_level(
    web: Web, redis_url: str, topic: str
) -> None:
    topic_with_levels(redis_url, topic, partitions=2)
    rows = table(web.get("/topic", params={"stream": topic}).text, "partitions")
    assert rows[0][:3] == ["Partition", "Level", "Stream"]
    streams = topic_streams(topic, 2, 3)
    assert [row[:3] for row in rows[1:]] == [
        [str(i % 2), str(i // 2), stream] for i, stream in enumerate(streams)
    ]
    assert sum(int(row[4]) for row in rows[1:]) == 6  # after the node: its length
