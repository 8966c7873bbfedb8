"""Operations on a topic that need no running consumer: stop/resume of entry IDs,
termination, seek, inspection, cleanup and dead letters. :class:`MessageQueue` has them
through :class:`TopicOperations`; each delegates to the module that owns the concern.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from ..config import CleanupPolicy
from . import admin, control
from .cleanup import Cleaner
from .control import StoppedView
from .deadletter import DeadLetter, DeadLetters


class TopicOperations:
    """The topic operations of a queue on ``stream`` (consumer group ``group``)."""

    stream: str
    group: str
    cleanup_policy: CleanupPolicy
    _stopped: StoppedView

    @property
    def client(self) -> aioredis.Redis:
        raise NotImplementedError

    # -- control --------------------------------------------------------------------
    async def stop_message(self, entry_id: str) -> None:
        """Stop one entry for every consumer of every group until resumed.

        Raises MessageNotFoundError if the entry does not exist.
        """
        await control.stop_message(self.client, self.stream, entry_id)
        self._stopped.ids.add(entry_id)

    async def resume_message(self, entry_id: str) -> None:
        """Resume a stopped entry: it is handled once more, with its original ID."""
        await control.resume_message(self.client, self.stream, entry_id)
        self._stopped.ids.discard(entry_id)

    async def stopped_messages(self) -> list[str]:
        return await control.stopped_ids(self.client, self.stream)

    async def terminate_topic(self, *, keep_dead_letters: bool = False) -> None:
        """Delete the stream, all its groups and streamq's keys (dead letters too unless
        ``keep_dead_letters``); every running consumer stops at once (auto_stopped)."""
        await control.terminate_topic(self.client, self.stream, keep_dead_letters=keep_dead_letters)

    async def seek(self, entry_id: str) -> None:
        """Move this queue's group: it next delivers entries after ``entry_id``."""
        await admin.seek(self.client, self.stream, self.group, entry_id)

    async def topic_info(self) -> admin.TopicInfo:
        """Stream length, first/last ID, groups, consumers, pending, lag, dead letters."""
        return await admin.topic_info(self.client, self.stream)

    # -- cleanup and dead letters ---------------------------------------------------
    def set_cleanup_policy(self, policy: CleanupPolicy) -> None:
        """Set the policy used by :meth:`cleanup` and (if enabled) by the next run()."""
        self.cleanup_policy = policy

    async def cleanup(self) -> int:
        """One cleanup pass under the current policy; return how many entries it removed."""
        report = await Cleaner(self.client, self.stream, self.cleanup_policy).run_once()
        return report.removed

    @property
    def dead_letter_queue(self) -> DeadLetters:
        return DeadLetters(self.client, self.stream)

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest ``count`` dead letters."""
        return await self.dead_letter_queue.list(count)

    async def replay_dead_letter(self, dead_letter_id: str | None = None) -> list[str]:
        """Publish one dead letter (or all, if no ID) again; return the new entry IDs."""
        if dead_letter_id is None:
            return await self.dead_letter_queue.replay_all()
        return [await self.dead_letter_queue.replay(dead_letter_id)]

    async def purge_dead_letters(self) -> int:
        """Delete all dead letters; return how many there were."""
        return await self.dead_letter_queue.purge()
