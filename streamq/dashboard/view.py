"""A topic as the dashboard sees and operates it, plain or partitioned.

The dashboard does not open a :class:`~streamq.MessageQueue` (that would create its
consumer group); :class:`TopicView` gives it the same :class:`TopicOperations` over the
dashboard's one deployment instead, so stop/resume, replay, purge, terminate and
``topic_info`` go to the partition an ID names (``"<i>:<ms>-<seq>"``) exactly as they do for
a queue. The partition count is the one recorded for the topic (1: a plain stream).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from ..config import CleanupPolicy
from ..publish.scheduled import ScheduledOperations
from ..topic import ownership
from ..topic.control import StoppedView
from ..topic.deadletter import DeadLetter
from ..topic.operations import TopicOperations
from ..topic.partitions import partition_streams, recorded_partitions
from ..wire.keys import Keys
from ..wire.routing import Deployment


class TopicView(ScheduledOperations, TopicOperations):
    """The operations of the topic ``stream`` (``partitions`` as recorded) through
    ``deployment``; no consumer group of its own (``seek`` is not offered here)."""

    def __init__(self, deployment: Deployment, stream: str, partitions: int = 1) -> None:
        self._given_deployment = deployment
        self.stream = stream
        self.group = ""
        self.cleanup_policy = CleanupPolicy()
        self.partitions = partitions
        self.streams = partition_streams(stream, partitions)

    @property
    def _deployment(self) -> Deployment:
        return self._given_deployment

    @property
    def client(self) -> aioredis.Redis:
        return self._deployment.client_for(self.stream)

    def _client_for(self, stream: str) -> aioredis.Redis:
        return self._deployment.client_for(stream)

    def _stopped_view(self, partition: int) -> StoppedView:
        # a queue keeps its consumers' copy of the stopped IDs; the dashboard has none
        # (consumers learn of a stop from Redis), so a throwaway copy takes the update
        return StoppedView()

    def _node_of(self, stream: str) -> str:
        return self._deployment.node_of(stream)

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1

    def nodes(self) -> list[str]:
        """The nodes serving the topic's streams (as last known), each once."""
        return sorted({self._node_of(stream) for stream in self.streams})

    def qualified(self, partition: int, entry_id: str) -> str:
        """An entry ID of partition ``partition`` as shown and accepted: ``"<i>:<id>"`` on
        a partitioned topic, the bare ID on a plain one."""
        return self._named(partition, entry_id)

    def qualified_letter(self, partition: int, letter: DeadLetter) -> DeadLetter:
        return self._named_letter(partition, letter)

    def dead_letter_at(self, letter_id: str) -> tuple[aioredis.Redis, str, str]:
        """The client, dead-letter stream and bare ID of the letter ``letter_id`` (as
        shown: naming its partition on a partitioned topic).

        Raises InvalidMessageIdError for an ID of no partition of the topic.
        """
        index, raw, client = self._locate(letter_id)
        return client, Keys(self.streams[index]).dead_letters, raw

    async def release_halted_key_of(self, group: str, key: str | None, *, skip: bool) -> bool:
        """Ask the owner to release a halted key of ``group``; False if it is not halted."""
        return await self._riding(
            ownership.release_halted, self._client_for, self.streams, group, key, skip=skip
        )

    def part(self, partition: int) -> tuple[str, aioredis.Redis]:
        """The stream of partition ``partition`` and its client."""
        stream = self.streams[partition]
        return stream, self._client_for(stream)


async def open_view(deployment: Deployment, stream: str) -> TopicView:
    """The view of ``stream`` with the partition count recorded for it."""
    partitions = await recorded_partitions(deployment.client_for(stream), stream)
    return TopicView(deployment, stream, partitions)
