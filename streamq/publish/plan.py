"""What a publish sends and what its replies mean, for the async :class:`MessageQueue` and
the blocking :class:`Publisher` alike (no I/O here; the twins only send and wait): the
partition of a message, the IDs that name it, the commands of an idempotent or durable
publish (``XADD ... IDMP`` or the fallback script, then ``WAIT``/``WAITAOF``) with the
NotReplicatedError of one that no replica confirmed in time, ``publish_many``'s chunks and
what a missing stream means for them (:class:`ManyPlan`), and what a scheduled publish
stores where (:class:`Scheduled`).

Every publish first adds with ``XADD ... NOMKSTREAM``: a producer keeps what it knows of a
topic's shape (its partition streams) for as long as it runs, and a topic terminated under
it, perhaps re-created with another partition count, would otherwise get its publishes in
streams no consumer reads. A nil reply (``StreamMissing``: the stream does not exist) makes
the producer check the topic again; then the entry is added with the stream created
(``make_stream``), as for the first publish to a new topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from ..config import Duration, positive, seconds
from ..errors import NotReplicatedError
from ..message import PUBLISH_MARKER
from ..payload.encoding import PayloadCodec
from ..wire import resp
from ..wire.partition_names import choose_partition as choose_partition
from ..wire.replies import added_id
from . import idempotency, scheduling

Fields = dict[bytes | str, bytes | str]
Key = str | bytes


def key_of(key: Key | Callable[[Any], Key] | None, item: Any) -> Key | None:
    """The key of one item of ``publish_many`` (one key for all, or each item's)."""
    return key(item) if callable(key) else key


def named(partitions: int, partition: int, entry_id: str) -> str:
    """An entry ID as publish returns it: ``"<partition>:<id>"`` on a partitioned topic."""
    return entry_id if partitions == 1 else f"{partition}:{entry_id}"


NOMKSTREAM = ("NOMKSTREAM",)  # XADD's options while the stream is known to exist


def stream_options(make_stream: bool) -> tuple[str, ...]:
    """XADD's options: none to create the stream if missing, else ``NOMKSTREAM``."""
    return () if make_stream else NOMKSTREAM


class ManyPlan:
    """What ``publish_many`` sends and what its replies mean, for both twins: the partition
    of each item, the entries of each partition in order, and the IDs returned.

    A pass sends each partition's entries still to add, partition by partition, in chunks
    of pipelined XADDs. The first pass adds with ``NOMKSTREAM``; the first chunk that finds
    its stream missing ends the pass (the items not added yet stay to add, in order). The
    producer then checks the topic again (one check for the call) and calls :meth:`again`,
    and a second pass adds every item left, creating the streams: each in the partition
    chosen first, unless the topic now has another partition count (a ``Publisher`` that
    follows the topic's record), then chosen anew as ``publish`` would. Every item is added
    once. An error raised by a send ends the call: what earlier chunks added stays in the
    stream, and no IDs are returned.
    """

    def __init__(
        self,
        items: Sequence[Any],
        key: Key | Callable[[Any], Key] | None,
        partitions: int,
        choose: Callable[[Key | None], int],
        marker: Callable[[], bytes] | None = None,
    ) -> None:
        self.partitions = partitions
        self.marker = marker  # a new marker per chunk (streamq.publish.resend), if given
        self._keys = [key(item) for item in items] if callable(key) else [key] * len(items)
        self._partition_of = [choose(one_key) for one_key in self._keys]
        self._ids: list[str | None] = [None] * len(self._keys)
        self._found_missing = False

    @property
    def found_missing(self) -> bool:
        """Whether a chunk of this pass found its stream missing."""
        return self._found_missing

    def sends(
        self, streams: Sequence[str], entries: Sequence[Fields], chunk: int, *, make_stream: bool
    ) -> Iterator[PartitionSend]:
        """One pass: the sends of each partition with items left (``streams``: the
        partitions' streams, ``entries``: every item's fields), until one finds its stream
        missing."""
        by_partition: dict[int, list[int]] = {}
        for position, partition in enumerate(self._partition_of):
            if self._ids[position] is None:
                by_partition.setdefault(partition, []).append(position)
        for partition, positions in by_partition.items():
            if self._found_missing:
                return
            yield PartitionSend(
                self, partition, streams[partition], positions, entries, chunk, make_stream
            )

    def again(self, partitions: int, choose: Callable[[Key | None], int]) -> None:
        """The topic was checked again after a stream was found missing: the items left
        keep their partitions, or are placed anew if the count changed to ``partitions``."""
        if partitions != self.partitions:
            for position, entry_id in enumerate(self._ids):
                if entry_id is None:
                    self._partition_of[position] = choose(self._keys[position])
            self.partitions = partitions
        self._found_missing = False

    def ids(self) -> list[str]:
        """The IDs in the items' order, named as publish returns them (once every item
        was added)."""
        return cast("list[str]", self._ids)

    def added(self, partition: int, positions: Sequence[int], replies: Sequence[Any]) -> None:
        """The replies of the XADDs of ``positions`` (:meth:`PartitionSend.take`)."""
        ids, prefix = self._ids, "" if self.partitions == 1 else f"{partition}:"  # as named()
        for position, reply in zip(positions, replies, strict=True):
            if reply is None:  # NOMKSTREAM found no stream
                self._found_missing = True
            else:
                ids[position] = prefix + reply.decode()


@dataclass(frozen=True, slots=True)
class Chunk:
    """One pipeline of ``publish_many``: its packed XADDs, how many, their entries, and
    the marker they all carry (``pub``; None when the plan has no markers)."""

    packed: bytes
    count: int
    entries: list[Fields]
    marker: bytes | None


class PartitionSend:
    """The chunks of one partition in a pass of :class:`ManyPlan`: iterate over its
    :class:`Chunk` s, hand each one's replies to :meth:`take`; the
    chunks stop at the first that found the stream missing (so would the rest)."""

    def __init__(
        self,
        plan: ManyPlan,
        partition: int,
        stream: str,
        positions: list[int],
        entries: Sequence[Fields],
        chunk: int,
        make_stream: bool,
    ) -> None:
        self.partition, self.stream = partition, stream
        self._plan, self._positions, self._entries = plan, positions, entries
        self._chunk, self._options = chunk, stream_options(make_stream)
        self._taken = 0

    def __iter__(self) -> Iterator[Chunk]:
        positions, new_marker = self._positions, self._plan.marker
        for start in range(0, len(positions), self._chunk):
            if self._plan.found_missing:
                return
            mine = [self._entries[i] for i in positions[start : start + self._chunk]]
            marker = None if new_marker is None else new_marker()
            common = () if marker is None else (PUBLISH_MARKER, marker)
            packed, count = resp.pack_xadds(self.stream, mine, self._options, common)
            yield Chunk(packed, count, mine, marker)

    def take(self, replies: Sequence[Any]) -> None:
        """The replies of the chunk last given."""
        positions = self._positions[self._taken : self._taken + len(replies)]
        self._taken += len(replies)
        self._plan.added(self.partition, positions, replies)


def xadd_command(
    stream: str, fields: Fields, key: str | None, *, xadd_idmp: bool, make_stream: bool
) -> list[Any]:
    """The XADD of one entry, idempotent under ``key`` when given: ``XADD ... IDMP`` where
    the server has it (``xadd_idmp``), else the fallback script's ``EVAL``."""
    if key is not None and not xadd_idmp:
        return idempotency.fallback_command(stream, key, fields, make_stream=make_stream)
    options = stream_options(make_stream)
    if key is not None:
        options += idempotency.idmp_options(key)
    flat = [item for pair in fields.items() for item in pair]
    return ["XADD", stream, *options, "*", *flat]


def durable_wait(replicas: int, wait: float, *, fsync: bool) -> tuple[str | int, ...]:
    """``WAIT replicas ms``, or with ``fsync`` ``WAITAOF 0 replicas ms`` (this master's own
    fsync is not waited for: it may run without an append-only file)."""
    ms = max(1, int(wait * 1000))
    return ("WAITAOF", 0, replicas, ms) if fsync else ("WAIT", replicas, ms)


@dataclass(frozen=True, slots=True)
class Durability:
    """A durable publish: the entry is confirmed once ``replicas`` replicas have it
    (``fsync``: in their append-only file), waiting at most ``wait`` seconds."""

    replicas: int
    wait: float
    fsync: bool

    @classmethod
    def of(cls, replicas: int, timeout: Duration, *, fsync: bool) -> Durability:
        """Checked options; raises ConfigError naming the bad one."""
        wait = seconds(timeout, "timeout")
        return cls(positive(replicas, "replicas"), wait, fsync)

    def left_since(self, started: float) -> Durability:
        """This durability with what is left of its wait since ``started``
        (``time.monotonic()``): a publish sent again (its stream was missing) keeps to one
        ``timeout`` in all."""
        return replace(self, wait=max(0.001, self.wait - (time.monotonic() - started)))

    def pack(self, xadd: list[Any]) -> bytes:
        """The XADD (:func:`xadd_command`) and the wait, pipelined: two replies."""
        wait = durable_wait(self.replicas, self.wait, fsync=self.fsync)
        return resp.pack_command(xadd) + resp.pack_command(wait)

    def read(self, replies: list[Any]) -> tuple[str, int]:
        """The entry ID and how many replicas confirmed it, from the two replies; raises
        StreamMissing if ``NOMKSTREAM`` found no stream."""
        entry_id, reached = replies
        return added_id(entry_id), int(reached[1] if self.fsync else reached)

    def confirm(self, entry_id: str, reached: int) -> str:
        """``entry_id`` (named as publish returns it) if enough replicas confirmed it;
        else raises NotReplicatedError."""
        if reached >= self.replicas:
            return entry_id
        where = "written to the append-only file of" if self.fsync else "reached"
        raise NotReplicatedError(
            f"entry {entry_id} {where} {reached} of {self.replicas} replica(s) within "
            f"{self.wait:g}s; it is in the stream, but a failover now could lose it",
            entry_id=entry_id, replicas=reached,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A message to schedule (``publish(..., delay=/at=)``), checked and encoded before
    anything is stored: its name, due time (Unix ms) and stored payload, and what picks its
    partition (``chooser``: its key, else its name, so that scheduling again under the same
    ``schedule_id`` lands where the first did and replaces it).

    ``named_with_key``: a ``schedule_id`` given with a key: scheduled again with another
    key, the earlier message may wait in another partition, and is cancelled there
    (:func:`other_partitions`)."""

    name: str
    due: int
    payload: str
    chooser: Key
    named_with_key: bool = False
    named: bool = False  # a schedule_id was given

    @classmethod
    def one(
        cls,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None,
        key: Key | None,
        delay: Duration | None,
        at: datetime | None,
        schedule_id: str | None,
        codec: PayloadCodec,
    ) -> Scheduled:
        """One message, encoded by ``codec``; raises ConfigError or MessageFormatError for
        bad input."""
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        name = scheduling.checked_schedule_id(schedule_id)
        meta = scheduling.schedule_meta(meta, due, now)
        payload = scheduling.encode_payload(codec.entry(message_type, data, meta), key)
        chooser = name if key is None else key
        named = schedule_id is not None
        return cls(name, due, payload, chooser, key is not None and named, named)

    @classmethod
    def many(
        cls,
        message_type: str,
        items: Sequence[Any],
        meta: Mapping[str, str] | None,
        key: Key | Callable[[Any], Key] | None,
        delay: Duration | None,
        at: datetime | None,
        codec: PayloadCodec,
    ) -> list[Scheduled]:
        """``publish_many``'s: every item checked first (nothing is stored if one is
        bad), all due at one time, each under its own new name."""
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        meta = scheduling.schedule_meta(meta, due, now)
        made = []
        for item in items:
            one_key = key_of(key, item)
            payload = scheduling.encode_payload(codec.entry(message_type, item, meta), one_key)
            name = scheduling.checked_schedule_id(None)
            made.append(cls(name, due, payload, name if one_key is None else one_key))
        return made


def scheduled_by_partition(partitions: Sequence[int]) -> dict[int, list[int]]:
    """The positions of scheduled messages in each partition (``partitions``: each one's),
    partitions in order: each partition's are stored together."""
    by_partition: dict[int, list[int]] = {}
    for position, partition in enumerate(partitions):
        by_partition.setdefault(partition, []).append(position)
    return dict(sorted(by_partition.items()))


def other_partitions(
    scheduled: Scheduled, partitions: int, partition: int, priorities: int = 1
) -> list[int]:
    """Where an earlier message of the same name may wait and is cancelled: the other
    streams (``partitions``: how many the topic has), for a message named with a key on
    a partitioned topic, or named on a topic with priorities (scheduled again at another
    level); else none."""
    if not (scheduled.named_with_key or (scheduled.named and priorities > 1)):
        return []
    return [other for other in range(partitions) if other != partition]
