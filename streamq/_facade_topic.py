"""The topic of :class:`~streamq.MessageQueue`: its shape and connections (from the queue's
:class:`~streamq.topic.handle.TopicHandle`) and its operations, each delegating in one line
to the queue's :class:`~streamq.topic.operations.TopicAdmin` or its
:class:`~streamq.publish.scheduled.ScheduledMessages` (whose docstrings they carry)."""

from __future__ import annotations

import redis.asyncio as aioredis

from ._facade_docs import adopt_docstrings
from ._opening import State
from .config import CleanupPolicy
from .errors import QueueStateError
from .publish.scheduled import PeriodicInfo, ScheduledMessages
from .publish.scheduling import ScheduledMessage
from .topic.admin import ScheduledSummary, TopicInfo
from .topic.deadletter import DeadLetter, DeadLetters
from .topic.halted import HaltedKey
from .topic.handle import TopicHandle
from .topic.operations import TopicAdmin
from .wire.routing import Deployment


class TopicFacade:
    """The operations on a queue's topic that need no running consumer."""

    cleanup_policy: CleanupPolicy
    _state: State
    _topic: TopicHandle  # the parts the queue holds
    _admin: TopicAdmin
    _schedule: ScheduledMessages

    # -- the topic's shape and connections -----------------------------------------
    @property
    def partitions(self) -> int:
        """The topic's number of partitions (1: a plain stream)."""
        return self._topic.partitions

    @property
    def priorities(self) -> int:
        """The topic's number of priority levels (1: none; 0 is the highest)."""
        return self._topic.priorities

    @property
    def streams(self) -> tuple[str, ...]:
        """The topic's streams: the stream itself, or one per partition and priority
        level (level ``L`` of partition ``i`` at index ``L * partitions + i``)."""
        return self._topic.streams

    async def _discover_partitions(self) -> int:
        """Take the partition count recorded for this topic (for tools that operate on any
        topic, as the CLI does); return it. Only before the queue runs."""
        if self._state is State.RUNNING:
            raise QueueStateError("cannot change the partitions of a running queue")
        await self._topic.use_recorded_shape()
        return self.partitions

    @property
    def _deployment(self) -> Deployment:
        return self._topic.deployment

    @property
    def client(self) -> aioredis.Redis:
        """The asyncio Redis client for this stream's keys (on a cluster: its slot's master)."""
        return self._topic.client

    def client_for(self, stream: str) -> aioredis.Redis:
        """The asyncio Redis client for one of the topic's streams (``mq.streams``) and its
        ``streamq:{<stream>}:`` keys: on a cluster, the master serving its slot."""
        return self._topic.client_for(stream)

    # -- control --------------------------------------------------------------------
    async def stop_message(self, entry_id: str) -> int:
        return await self._admin.stop_message(entry_id)

    async def resume_message(self, entry_id: str) -> int:
        return await self._admin.resume_message(entry_id)

    async def stopped_messages(self) -> list[str]:
        """The stopped entry IDs (naming their partition on a partitioned topic)."""
        return await self._admin.stopped_messages()

    async def terminate_topic(self, *, keep_dead_letters: bool = False) -> None:
        await self._admin.terminate_topic(keep_dead_letters=keep_dead_letters)

    async def seek(self, entry_id: str) -> None:
        await self._admin.seek(entry_id)

    async def topic_info(self) -> TopicInfo:
        return await self._admin.topic_info()

    # -- flow control ---------------------------------------------------------------
    async def pause(self, type: str | None = None) -> bool:
        return await self._admin.pause(type)

    async def resume(self, type: str | None = None) -> bool:
        return await self._admin.resume(type)

    async def paused(self) -> list[str]:
        return await self._admin.paused()

    # -- cleanup and dead letters ---------------------------------------------------
    def set_cleanup_policy(self, policy: CleanupPolicy) -> None:
        """Set the policy used by :meth:`cleanup` and (if enabled) by the next run()."""
        self.cleanup_policy = policy

    async def cleanup(self) -> int:
        return await self._admin.cleanup(self.cleanup_policy)

    @property
    def dead_letter_queue(self) -> DeadLetters:
        """The dead-letter stream of a plain topic (a partitioned one has one per
        partition: use :meth:`dead_letters`, :meth:`replay_dead_letter`, ...)."""
        return self._admin.dead_letter_queue

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return await self._admin.dead_letters(count)

    async def replay_dead_letter(self, dead_letter_id: str | None = None) -> list[str]:
        return await self._admin.replay_dead_letter(dead_letter_id)

    async def purge_dead_letters(self) -> int:
        return await self._admin.purge_dead_letters()

    # -- ordered mode ---------------------------------------------------------------
    async def halted_keys(self) -> list[HaltedKey]:
        return await self._admin.halted_keys()

    async def release_halted_key(self, key: str | None, *, skip: bool = False) -> bool:
        return await self._admin.release_halted_key(key, skip=skip)

    async def partition_owners(self) -> list[tuple[str, int] | None]:
        return await self._admin.partition_owners()

    # -- scheduled messages ---------------------------------------------------------
    async def cancel_scheduled(self, scheduled_id: str) -> bool:
        return await self._schedule.cancel_scheduled(scheduled_id)

    async def scheduled(self, limit: int = 100) -> list[ScheduledMessage]:
        return await self._schedule.scheduled(limit)

    async def periodic_publishers(self) -> list[PeriodicInfo]:
        return await self._schedule.periodic_publishers()

    async def scheduled_summary(self) -> ScheduledSummary:
        return await self._schedule.scheduled_summary()


adopt_docstrings(TopicFacade, TopicAdmin, ScheduledMessages)
