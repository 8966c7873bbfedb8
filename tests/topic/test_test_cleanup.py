"""The pytest plugin's cleanup (``streamq.testing.delete_stream_keys``, behind the
``streamq_stream`` fixture) deletes a whole topic: every partition and priority level
stream and their keys, on one node and on a cluster, so an external server keeps nothing."""

from __future__ import annotations

import pytest

from streamq import MessageQueue
from streamq.testing import delete_stream_keys
from streamq.wire.keys import Keys
from streamq.wire.partition_names import topic_streams
from tests.helpers.clients import sync_client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("partitions", "priorities"), [(1, 3), (2, 1), (2, 3)])
async def test_a_topic_is_deleted_with_every_stream_and_its_keys(
    where: str, topic: str, partitions: int, priorities: int
) -> None:
    streams = topic_streams(topic, partitions, priorities)
    async with MessageQueue(
        where, stream=topic, group="g", partitions=partitions, priorities=priorities
    ) as mq:
        for level in range(priorities):
            await mq.publish_many("job", [level] * 4, priority=level if priorities > 1 else None)
    assert all(_exists(where, s) for s in streams), "the topic was not written"
    delete_stream_keys(where, topic)
    left = [s for s in (*streams, Keys(topic).partitions) if _exists(where, s)]
    assert not left, f"left on the server after the cleanup: {left}"


def test_a_name_nothing_was_written_to_is_no_error(where: str, topic: str) -> None:
    delete_stream_keys(where, topic)
    assert not _exists(where, topic)


def _exists(url: str, key: str) -> bool:
    with sync_client(url, key) as client:
        return bool(client.exists(key))
