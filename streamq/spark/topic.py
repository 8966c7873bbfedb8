"""The topic a Spark job reads or writes: a plain stream, or the partitions of a partitioned
topic; and the offsets of the Spark source for either.

The partition count comes from the topic's record (``streamq:{T}:partitions``, written by a
``MessageQueue(partitions=N)``), or from option ``topicPartitions`` (which creates the
record if absent, and must agree with it if present). No record and no option: a plain
stream, exactly as before partitioned topics existed.

Offsets: a plain stream's offset is ``{"id": "<ms>-<seq>", "n": ...}`` (unchanged, so old
checkpoints go on working); a partitioned topic's holds one such offset per partition,
``{"0": {"id": ..., "n": ...}, "1": {...}, ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..topic.partitions import (
    check_partition_count_sync,
    recorded_partitions_sync,
    recorded_priorities_sync,
)
from ..wire.client import connect_sync
from ..wire.partition_names import topic_streams
from .offsets import connect

Offset = dict[str, Any]


@dataclass(frozen=True)
class SparkTopic:
    """``name`` with ``count`` partitions (1: a plain stream) and ``levels`` priority
    levels (1: none): it is read from every stream of every level, and written to the
    level each row chooses (the default one if it chooses none)."""

    name: str
    count: int
    levels: int = 1

    @property
    def partitioned(self) -> bool:
        """Whether it has more than one stream (its IDs name the stream's index)."""
        return len(self.streams) > 1

    @property
    def streams(self) -> tuple[str, ...]:
        """Every stream, as a queue numbers them (a level's partitions after another's)."""
        return topic_streams(self.name, self.count, self.levels)

    def columns_of(self, index: int) -> tuple[int, ...]:
        """The trailing columns of stream ``index``'s rows: its ``partition`` (the stream's
        index without priorities), and with priorities its level (``priority``)."""
        if self.levels == 1:
            return (index,)
        level, partition = divmod(index, self.count)
        return (partition, level)

    def encode(self, offsets: Sequence[Mapping[str, Any]]) -> Offset:
        """One offset per partition -> the offset Spark keeps in its checkpoint."""
        if not self.partitioned:
            return dict(offsets[0])
        return {str(i): dict(o) for i, o in enumerate(offsets)}

    def decode(self, value: Mapping[str, Any] | None) -> list[Mapping[str, Any] | None]:
        """Spark's offset -> one offset per partition (None: the beginning of each).

        Raises ConfigError for an offset of the other kind (a checkpoint written for a
        plain stream read as a partitioned topic, or another partition count).
        """
        count = len(self.streams)
        if not value:
            return [None] * count
        if not self.partitioned:
            if "id" not in value:
                raise ConfigError(
                    f"the checkpoint holds offsets of a partitioned topic ({sorted(value)}), "
                    f"but {self.name!r} is a plain stream: use a new checkpointLocation"
                )
            return [value]
        expected = [str(i) for i in range(count)]
        if sorted(value, key=_numeric) != expected:
            raise ConfigError(
                f"the checkpoint holds offsets of {_describe(value)}, but {self.name!r} has "
                f"{count} streams: use a new checkpointLocation"
            )
        return [value[key] for key in expected]


def _numeric(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (-1, key)


def _describe(value: Mapping[str, Any]) -> str:
    return "a plain stream" if "id" in value else f"{len(value)} partitions"


def resolve_topic(url: str, name: str, requested: int | None) -> SparkTopic:
    """The topic ``name`` as recorded, or as ``requested`` by option ``topicPartitions``
    (recorded now if it was not). Raises ConfigError when the two disagree."""
    client = connect(url, name)
    try:
        levels = recorded_priorities_sync(client, name)
        if requested is None:
            return SparkTopic(name, recorded_partitions_sync(client, name) or 1, levels)
        try:
            check_partition_count_sync(client, name, requested, levels)
        except ConfigError as e:
            raise ConfigError(f"option 'topicPartitions': {e}") from e
        return SparkTopic(name, requested, levels)
    finally:
        client.close()


def check_topic_again(url: str, topic: SparkTopic) -> None:
    """A write found a stream of ``topic`` missing: it may go on (and make the stream) if
    the topic's record still says what the write found, recorded again if a terminate took
    it. Raises ConfigError if the topic was re-created otherwise under the write."""
    client = connect(url, topic.name)
    try:
        check_partition_count_sync(client, topic.name, topic.count, topic.levels)
    except ConfigError as e:
        raise ConfigError(
            f"topic {topic.name!r} changed under this write (terminated and re-created?): "
            f"{e}. Rows were not added to streams no consumer of it reads; run the write "
            "again (a streaming query: restart it; it goes on from its checkpoint)"
        ) from e
    finally:
        client.close()


class TopicClients:
    """Blocking clients for each partition stream, over one set of connections."""

    def __init__(self, url: str, topic: SparkTopic) -> None:
        self._deployment = connect_sync(url)
        self.streams = topic.streams
        self.clients = [self._deployment.client_for(s) for s in self.streams]

    def __iter__(self) -> Any:
        return iter(zip(self.clients, self.streams, strict=True))

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self._deployment.close()
