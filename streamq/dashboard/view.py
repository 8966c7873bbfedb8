"""A topic as the dashboard sees and operates it, plain or partitioned.

The dashboard does not open a :class:`~streamq.MessageQueue` (that would create its
consumer group); :class:`TopicView` holds the same parts a queue does (a
:class:`~streamq.topic.handle.TopicHandle`, a :class:`~streamq.topic.operations.TopicAdmin`,
:class:`~streamq.publish.scheduled.ScheduledMessages`) over the dashboard's one deployment
instead, so stop/resume, replay, purge, terminate and ``topic_info`` go to the partition an
ID names (``"<i>:<ms>-<seq>"``) exactly as they do for a queue. The partition count is the
one recorded for the topic (1: a plain stream).
"""

from __future__ import annotations

from functools import partial

import redis.asyncio as aioredis

from ..flow import pause as flow_pause
from ..payload.encoding import PayloadCodec
from ..payload.keyring import Keyring
from ..publish.scheduled import ScheduledMessages
from ..topic import ownership
from ..topic.deadletter import DeadLetter
from ..topic.handle import TopicHandle
from ..topic.operations import TopicAdmin
from ..topic.partitions import recorded_partitions, recorded_priorities
from ..wire.client import ride_through
from ..wire.keys import Keys
from ..wire.routing import Deployment


class TopicView:
    """The topic ``stream`` (``partitions`` as recorded) through ``deployment``; no
    consumer group of its own (``seek`` is not offered here): ``admin`` operates it,
    ``schedule`` lists and cancels its scheduled messages. ``keyring``: the dashboard's,
    with which a replay encrypts again what an older key encrypted (as a queue's does)."""

    def __init__(
        self,
        deployment: Deployment,
        stream: str,
        partitions: int = 1,
        keyring: Keyring | None = None,
        priorities: int = 1,
    ) -> None:
        self.topic = TopicHandle(stream, partitions, lambda: deployment, priorities)
        if keyring is not None:
            self.topic.codec = PayloadCodec(encryption=keyring)
        self.schedule = ScheduledMessages(self.topic)
        self.admin = TopicAdmin(self.topic, "", self.schedule.scheduled_summary)

    @property
    def stream(self) -> str:
        return self.topic.stream

    @property
    def partitions(self) -> int:
        """The topic's streams: one per partition and priority level (IDs name them)."""
        return len(self.topic.streams)

    @property
    def partitioned(self) -> bool:
        return len(self.topic.streams) > 1

    @property
    def client(self) -> aioredis.Redis:
        return self.topic.client

    def nodes(self) -> list[str]:
        """The nodes serving the topic's streams (as last known), each once."""
        return sorted({self.topic.node_of(stream) for stream in self.topic.streams})

    def qualified(self, partition: int, entry_id: str) -> str:
        """An entry ID of partition ``partition`` as shown and accepted: ``"<i>:<id>"`` on
        a partitioned topic, the bare ID on a plain one."""
        return self.admin.named(partition, entry_id)

    def qualified_letter(self, partition: int, letter: DeadLetter) -> DeadLetter:
        return self.admin.named_letter(partition, letter)

    def dead_letter_at(self, letter_id: str) -> tuple[aioredis.Redis, str, str]:
        """The client, dead-letter stream and bare ID of the letter ``letter_id`` (as
        shown: naming its partition on a partitioned topic).

        Raises InvalidMessageIdError for an ID of no partition of the topic.
        """
        index, raw, client = self.admin.locate(letter_id)
        return client, Keys(self.topic.streams[index]).dead_letters, raw

    async def release_halted_key_of(self, group: str, key: str | None, *, skip: bool) -> bool:
        """Ask the owner to release a halted key of ``group``; False if it is not halted."""
        release = partial(ownership.release_halted, self.topic.client_for, self.topic.streams,
                          group, key, skip=skip)  # fmt: skip
        return await ride_through(self.topic.deployment, release)

    async def pause_of(self, group: str, type_name: str | None, *, pausing: bool) -> bool:
        """Pause (or resume) ``group``, or only ``type_name`` in it, as ``mq.pause()``
        does; False if it was paused (not paused) already."""
        act = flow_pause.pause if pausing else flow_pause.resume
        change = partial(act, self.topic.client, self.topic.stream, group, type_name)
        return await ride_through(self.topic.deployment, change)

    def part(self, partition: int) -> tuple[str, aioredis.Redis]:
        """The stream of partition ``partition`` and its client."""
        stream = self.topic.streams[partition]
        return stream, self.topic.client_for(stream)


async def open_view(
    deployment: Deployment, stream: str, keyring: Keyring | None = None
) -> TopicView:
    """The view of ``stream`` with the partition count (and priority levels) recorded."""
    client = deployment.client_for(stream)
    partitions = await recorded_partitions(client, stream)
    return TopicView(
        deployment, stream, partitions, keyring, await recorded_priorities(client, stream)
    )
