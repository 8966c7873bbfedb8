"""What a publish sends and what its replies mean, for the async :class:`MessageQueue` and
the blocking :class:`Publisher` alike (no I/O here): the partition of a message, the IDs
that name it, and the commands of an idempotent or durable publish (``XADD ... IDMP`` or the
fallback script, then ``WAIT``/``WAITAOF``) with the NotReplicatedError of one that no
replica confirmed in time.

Every publish first adds with ``XADD ... NOMKSTREAM``: a producer keeps what it knows of a
topic's shape (its partition streams) for as long as it runs, and a topic terminated under
it, perhaps re-created with another partition count, would otherwise get its publishes in
streams no consumer reads. A nil reply (``StreamMissing``: the stream does not exist) makes
the producer check the topic again; then the entry is added with the stream created
(``make_stream``), as for the first publish to a new topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..config import Duration, positive, seconds
from ..errors import NotReplicatedError
from ..topic.partitions import partition_for_key
from ..wire import resp
from ..wire.replies import added_id
from . import idempotency

Fields = dict[bytes | str, bytes | str]
Key = str | bytes


def choose_partition(key: Key | None, partitions: int, next_turn: Callable[[], int]) -> int:
    """The partition of a message: by its key's hash, else ``next_turn()`` (a count that
    goes up by one each call) modulo the partitions."""
    if key is not None:
        return partition_for_key(key, partitions)
    if partitions == 1:
        return 0
    return next_turn() % partitions


def key_of(key: Key | Callable[[Any], Key] | None, item: Any) -> Key | None:
    """The key of one item of ``publish_many`` (one key for all, or each item's)."""
    return key(item) if callable(key) else key


def group_by_partition(
    items: Iterable[Any],
    key: Key | Callable[[Any], Key] | None,
    choose: Callable[[Key | None], int],
) -> dict[int, list[int]]:
    """The positions of ``items`` in each partition (``key``: one for all, or each item's
    from a function), as ``publish_many`` sends them."""
    by_partition: dict[int, list[int]] = {}
    for position, item in enumerate(items):
        one_key = key_of(key, item)
        by_partition.setdefault(choose(one_key), []).append(position)
    return by_partition


def named(partitions: int, partition: int, entry_id: str) -> str:
    """An entry ID as publish returns it: ``"<partition>:<id>"`` on a partitioned topic."""
    return entry_id if partitions == 1 else f"{partition}:{entry_id}"


NOMKSTREAM = ("NOMKSTREAM",)  # XADD's options while the stream is known to exist


def stream_options(make_stream: bool) -> tuple[str, ...]:
    """XADD's options: none to create the stream if missing, else ``NOMKSTREAM``."""
    return () if make_stream else NOMKSTREAM


def packed_chunks(
    stream: str, entries: Sequence[Fields], chunk: int, *, make_stream: bool
) -> Iterator[tuple[bytes, int]]:
    """Pipelines of ``chunk`` XADDs to ``stream`` (``publish_many``), and how many each holds."""
    options = stream_options(make_stream)
    for start in range(0, len(entries), chunk):
        yield resp.pack_xadds(stream, entries[start : start + chunk], options)


def added_ids(replies: Sequence[Any]) -> list[str | None]:
    """The IDs of a pipeline of XADDs; None where ``NOMKSTREAM`` found no stream."""
    return [None if reply is None else reply.decode() for reply in replies]


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
