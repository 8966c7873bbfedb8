"""Operations on a topic that need no running consumer: stop/resume of entry IDs,
termination, seek, inspection, cleanup, dead letters and scheduled messages (those in
:mod:`.scheduled`). :class:`MessageQueue` and the dashboard's topic view hold them in a
:class:`TopicAdmin`; each delegates to the module that owns the concern.

On a cluster or a Sentinel service each step rides through a failover or a slot migration
(:func:`~streamq.wire.client.ride_through`, as publishing does), except replaying dead
letters: a replay whose reply was lost may have published, and a second one would again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from .._ids import StreamId
from ..config import CleanupPolicy
from ..errors import ConfigError, InvalidMessageIdError
from ..flow import pause as flow_pause
from ..flow import waiting as flow_waiting
from ..wire.client import ride_through
from ..wire.damage import noting
from ..wire.keys import Keys
from . import admin, control, ownership
from .cleanup import Cleaner
from .deadletter import DeadLetter, DeadLetters
from .halted import HaltedKey
from .partitions import PartitionedId, forget_partitions

if TYPE_CHECKING:
    from .handle import TopicHandle

T = TypeVar("T")


class TopicAdmin:
    """The topic operations of a queue on ``topic`` (consumer group ``group``; None: a
    fan-out queue, which has none), and of the dashboard's view of a topic.

    On a partitioned topic each operation goes to the partitions it concerns: an entry ID
    names its partition (``"3:<ms>-<seq>"``), and listings cover every partition.
    """

    def __init__(
        self,
        topic: TopicHandle,
        group: str | None,
        scheduled_summary: Callable[[], Awaitable[admin.ScheduledSummary]],
    ) -> None:
        self._topic, self.group, self._scheduled_summary = topic, group, scheduled_summary

    def locate(self, entry_id: str) -> tuple[int, str, aioredis.Redis]:
        """The partition, its stream and its client, of an entry ID's text form."""
        where = PartitionedId.parse(entry_id, len(self._topic.streams))
        stream = self._topic.streams[where.partition]
        return where.partition, where.entry_id, self._topic.client_for(stream)

    def _require_group(self, operation: str) -> str:
        """This queue's group, for an operation that needs one (ConfigError on fan-out)."""
        if self.group is None:
            raise ConfigError(
                f"a fan-out queue (group=None) has no consumer group: {operation} needs one; "
                "use a MessageQueue with a group on the same stream"
            )
        return self.group

    def named(self, partition: int, entry_id: str) -> str:
        """An entry ID of partition ``partition`` as shown and accepted: ``"<i>:<id>"`` on
        a partitioned topic, the bare ID on a plain one."""
        return entry_id if len(self._topic.streams) == 1 else f"{partition}:{entry_id}"

    def _parts(self) -> list[tuple[int, str, aioredis.Redis]]:
        return [(i, s, self._topic.client_for(s)) for i, s in enumerate(self._topic.streams)]

    async def _riding(self, operation: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``operation(*args, **kwargs)``, retried while a cluster or a Sentinel service
        reconfigures (up to 30 s); on a single node its ServerUnavailableError is raised
        at once."""
        return await ride_through(self._topic.deployment, partial(operation, *args, **kwargs))

    # -- control --------------------------------------------------------------------
    async def stop_message(self, entry_id: str) -> int:
        """Stop one entry for every consumer of every group until resumed; return how many
        groups' pending entries it was taken from.

        Raises MessageNotFoundError if the entry does not exist, ConfigError on a fan-out
        queue (it reads without a group, so a stopped ID would not be set aside for it).
        """
        self._require_group("stop_message")
        index, raw, client = self.locate(entry_id)
        stream = self._topic.streams[index]
        groups = await self._riding(control.stop_message, client, stream, raw)
        self._topic.stopped[index].ids.add(raw)
        return groups

    async def resume_message(self, entry_id: str) -> int:
        """Resume a stopped entry: it is handled once more, with its original ID. Return
        how many groups it was given back to.

        Raises MessageNotFoundError if the entry is not stopped (also when a resume whose
        reply a failover cut off is retried: it was resumed then); ConfigError on a fan-out
        queue."""
        self._require_group("resume_message")
        index, raw, client = self.locate(entry_id)
        stream = self._topic.streams[index]
        groups = await self._riding(control.resume_message, client, stream, raw)
        self._topic.stopped[index].ids.discard(raw)
        return groups

    async def stopped_messages(self) -> list[str]:
        """The IDs stopped with :meth:`stop_message` on this topic (every partition), as
        ``publish`` returned them."""
        return [
            self.named(i, entry_id)
            for i, stream, client in self._parts()
            for entry_id in await self._riding(control.stopped_ids, client, stream)
        ]

    async def terminate_topic(self, *, keep_dead_letters: bool = False) -> None:
        """Delete the stream (every partition), all its groups and streamq's keys (dead
        letters too unless ``keep_dead_letters``); every running consumer stops at once.
        A topic of many streams keeps the record of its shape with its letters: they are
        kept per stream, and a queue opened on the name later finds them through it."""
        groups = await self._group_names()
        plain = len(self._topic.streams) == 1  # its one stream holds the topic's own keys
        topic_keys = ownership.membership_keys(self._topic.stream, groups)
        keys = Keys(self._topic.stream)
        topic_keys += [key for group in groups for key in (keys.paused(group), keys.waiting(group))]
        if not plain:  # the periodic publishers' record is the topic's (a plain one's: below)
            topic_keys.append(keys.periodic)
        for _, stream, client in self._parts():
            doomed = ownership.lease_keys(stream, groups) + (topic_keys if plain else [])
            await self._riding(
                control.terminate_topic, client, stream,
                keep_dead_letters=keep_dead_letters, group_keys=doomed,
            )  # fmt: skip
        if not plain:
            await self._riding(
                forget_partitions, self._topic.client, self._topic.stream, topic_keys,
                keep_record=keep_dead_letters,
            )  # fmt: skip

    async def _group_names(self) -> set[str]:
        """The groups of every partition, and this queue's own (its keys go with the
        topic even when its stream is already gone)."""
        names = {self.group} if self.group is not None else set()
        for _, stream, client in self._parts():
            names |= await self._riding(admin.group_names, client, stream)
        return names

    async def seek(self, entry_id: str) -> None:
        """Move this queue's group: it next delivers entries after ``entry_id``. On a
        partitioned topic ``"$"`` or ``"0"`` move every partition, an ID its own.
        ConfigError on a fan-out queue (its start position is ``start=``)."""
        group = self._require_group("seek")
        if entry_id in ("$", "0"):
            for _, stream, client in self._parts():
                await self._riding(admin.seek, client, stream, group, entry_id)
            return
        try:
            index, raw, client = self.locate(entry_id)
        except InvalidMessageIdError as e:
            raise ConfigError(f"seek: {e}") from e
        stream = self._topic.streams[index]
        await self._riding(admin.seek, client, stream, group, raw)

    async def topic_info(self) -> admin.TopicInfo:
        """Stream length, first/last ID, groups, consumers, pending, lag, dead letters; on
        a partitioned topic the totals and a row per partition (``partitions``); what
        each group pauses (``paused``) and what its running consumers hold back, by
        reason, as they reported it lately (``waiting``); the damaged records of streamq's
        that were set aside (``damaged``)."""
        with noting() as damaged:
            info = await self._topic_info()
        return replace(info, damaged=[str(record) for record in damaged])

    async def _topic_info(self) -> admin.TopicInfo:
        if len(self._topic.streams) == 1:
            info = await self._riding(admin.topic_info, self._topic.client, self._topic.stream)
        else:
            # loaded on first use: only a partitioned topic's info reads its partitions
            from .partitioned_info import Part, partitioned_topic_info

            async def partitioned() -> admin.TopicInfo:  # a failover may move a partition
                topic = self._topic
                parts = [Part(i, s, c, topic.node_of(s), *topic.place_of(i))
                         for i, s, c in self._parts()]  # fmt: skip
                return await partitioned_topic_info(self._topic.stream, parts)

            info = await self._riding(partitioned)
        waiting = await self._scheduled_summary()
        groups = {g.name for g in info.groups} | ({self.group} if self.group else set())
        topic = self._topic
        paused = await self._riding(flow_pause.paused_groups, topic.client, topic.stream, groups)
        held = await self._riding(flow_waiting.waiting_groups, topic.client, topic.stream, groups)
        return replace(
            info, scheduled=waiting.count, next_due=waiting.next_due, paused=paused, waiting=held
        )

    # -- flow control ---------------------------------------------------------------
    async def pause(self, type: str | None = None) -> bool:
        """Pause this queue's group, or only entries of ``type``: every consumer of the
        group, in every process, stops starting them within a second (entries already
        running finish), until :meth:`resume`; it persists across restarts. Returns False
        if it was paused already. On a partitioned topic, every partition at once.

        Raises ConfigError for a name that is no message type, or on a fan-out queue."""
        group = self._require_group("pause")
        topic = self._topic
        return await self._riding(flow_pause.pause, topic.client, topic.stream, group, type)

    async def resume(self, type: str | None = None) -> bool:
        """Undo :meth:`pause` of the group (``type=None``) or of ``type``; a type paused on
        its own stays paused when the group resumes. Returns False if it was not paused.
        (:meth:`resume_message` is another thing: it resumes one stopped entry.)"""
        group = self._require_group("resume")
        topic = self._topic
        return await self._riding(flow_pause.resume, topic.client, topic.stream, group, type)

    async def paused(self) -> list[str]:
        """What is paused in this queue's group: ``"*"`` (the whole group) and the types
        paused on their own; empty when nothing is."""
        group = self._require_group("paused")
        topic = self._topic
        found = await self._riding(flow_pause.paused, topic.client, topic.stream, group)
        return [record.target for record in found]

    # -- cleanup and dead letters ---------------------------------------------------
    async def cleanup(self, policy: CleanupPolicy) -> int:
        """One cleanup pass (each partition in turn) under the current policy; return how
        many entries it removed."""
        removed = 0
        for _, stream, client in self._parts():
            cleaner = Cleaner(client, stream, policy)
            removed += (await self._riding(cleaner.run_once)).removed
        return removed

    @property
    def dead_letter_queue(self) -> DeadLetters:
        """The dead-letter stream of a plain topic (a partitioned one has one per
        partition: use :meth:`dead_letters`, :meth:`replay_dead_letter`, ...)."""
        if len(self._topic.streams) > 1:
            raise ConfigError("a partitioned topic has a dead-letter stream per partition")
        return DeadLetters(self._topic.client, self._topic.stream)

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest ``count`` dead letters, oldest first (on a partitioned topic, of all
        its partitions, by when each was dead-lettered; their ``id`` and ``original_id``
        then name the partition)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"count must be an integer >= 1, got {count!r}")
        found: list[tuple[StreamId, int, DeadLetter]] = []
        for i, stream, client in self._parts():
            listed = await self._riding(DeadLetters(client, stream).list, count)
            found.extend((StreamId.parse(letter.id), i, letter) for letter in listed)
        found.sort(key=lambda one: (one[0], one[1]))
        return [self.named_letter(i, letter) for _, i, letter in found[:count]]

    def named_letter(self, partition: int, letter: DeadLetter) -> DeadLetter:
        """A dead letter of partition ``partition`` with its IDs named as :meth:`named`."""
        if len(self._topic.streams) == 1:
            return letter
        return replace(
            letter,
            id=f"{partition}:{letter.id}",
            original_id=f"{partition}:{letter.original_id}",
        )

    async def replay_dead_letter(self, dead_letter_id: str | None = None) -> list[str]:
        """Publish one dead letter (or all, if no ID) again; return the new entry IDs."""
        if dead_letter_id is None:
            return [
                self.named(i, new_id)
                for i, stream, client in self._parts()
                for new_id in await self._replaying(i, client, stream).replay_all()
            ]
        index, raw, client = self.locate(dead_letter_id)
        letters = self._replaying(index, client, self._topic.streams[index])
        return [self.named(index, await letters.replay(raw))]

    def _replaying(self, partition: int, client: aioredis.Redis, stream: str) -> DeadLetters:
        """The dead letters of ``stream`` (partition ``partition``), replayed with the
        queue's keyring (if any), their notes naming the original as :meth:`named`."""
        prefix = self.named(partition, "")
        return DeadLetters(client, stream, keyring=self._topic.codec.keyring, id_prefix=prefix)

    async def purge_dead_letters(self) -> int:
        """Delete all dead letters; return how many there were."""
        return sum([await self._riding(DeadLetters(c, s).purge) for _, s, c in self._parts()])

    # -- ordered mode ---------------------------------------------------------------
    async def halted_keys(self) -> list[HaltedKey]:
        """The keys halted in ordered mode with ``on_poison="halt"``: each with its
        partition, the entry it halted on, the reason, and a release asked for (or None)."""
        group = self._require_group("halted_keys")
        return await self._riding(
            ownership.halted_keys, self._topic.client_for, self._topic.streams, group
        )

    async def release_halted_key(self, key: str | None, *, skip: bool = False) -> bool:
        """Let a halted ``key`` go on (None: the keyless entries): ``skip=True``
        dead-letters the entry it halted on, ``skip=False`` runs that entry again with a
        fresh delivery count. The partition's owner acts within a second. Returns False if
        the key is not halted."""
        group = self._require_group("release_halted_key")
        topic = self._topic
        return await self._riding(ownership.release_halted, topic.client_for, topic.streams, group,
                                  key, skip=skip)  # fmt: skip

    async def partition_owners(self) -> list[tuple[str, int] | None]:
        """In ordered mode, each partition's owner and fencing token (None: unowned)."""
        group = self._require_group("partition_owners")
        return await self._riding(
            ownership.owners, self._topic.client_for, self._topic.streams, group
        )
