"""What the engine is built from (:class:`Topic`, :class:`Policies`, :class:`Mode`), what
one consumer of it is made of (:class:`Parts`, wired by :mod:`streamq.consume.build`), and
what its source must be (:class:`Source`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..config import BatchConfig, CleanupPolicy, ConsumerConfig, OnPoison, RetryPolicy
from ..flow.settings import FlowConfig
from ..topic.control import ControlListener
from .acks import Acker
from .batching import Batcher
from .budget import Slots
from .capacity import Capacity
from .claiming import Claimer
from .dispatch import Dispatcher
from .flow_stage import FlowStage
from .pool import PoolEntrance
from .staging import OutputSettings

if TYPE_CHECKING:
    from ..payload.keyring import Keyring
    from ..topic.handle import TopicHandle


@dataclass(frozen=True, slots=True)
class Topic:
    """What a queue consumes: the topic, its streams (one per partition), group, name."""

    name: str
    streams: tuple[str, ...]
    group: str
    consumer: str
    partitions: int = 1
    priorities: int = 1  # stream ``i`` is of level ``i // partitions``

    @classmethod
    def of(cls, handle: TopicHandle, group: str, consumer: str) -> Topic:
        """The topic ``handle`` is, consumed by ``consumer`` of ``group``."""
        return cls(handle.stream, handle.streams, group, consumer, handle.partitions,
                   handle.priorities)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Policies:
    config: ConsumerConfig
    retry: RetryPolicy
    batch: BatchConfig
    cleanup: CleanupPolicy
    flow: FlowConfig = field(default_factory=FlowConfig)
    # what msg.publish needs (None: a consumer built without a queue stages no outputs)
    outputs: OutputSettings | None = None

    @property
    def keyring(self) -> Keyring | None:
        """The queue's keyring, if any: it encrypts the replies to encrypted requests."""
        return None if self.outputs is None else self.outputs.codec.keyring


@dataclass(frozen=True, slots=True)
class Mode:
    """Which engine a queue runs: fan-out (no group), ordered, or shared."""

    fanout: bool
    ordered: bool
    on_poison: OnPoison


class Source(Protocol):
    """What a consumer reads from: it enqueues what it reads until the consumer stops."""

    claimed_total: int  # entries it took over from other consumers (a read with CLAIM)

    async def run(self) -> None: ...

    def cancel(self) -> None:
        """Wake a blocked read at once (stop)."""


@dataclass(frozen=True, slots=True)
class Parts:
    """The collaborators of one consumer, wired by :mod:`streamq.consume.build`."""

    capacity: Capacity  # owns the in-flight table
    acker: Acker | None  # every XACK of the consumer's entries (None: fan-out)
    reader: Source
    claimer: Claimer | None  # None: fan-out
    dispatcher: Dispatcher
    batcher: Batcher
    listener: ControlListener
    handler_slots: Slots | None  # a partition's: shared with the topic's other partitions
    pool: PoolEntrance | None = None  # a partition's way into the topic's one worker pool
    flow: FlowStage | None = None  # where entries wait for flow control (a group's)
