"""What one consumer of the engine is made of (:class:`Parts`, wired by
:mod:`streamq.consume.build`), and what its source must be (:class:`Source`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..topic.control import ControlListener
from .acks import Acker
from .batching import Batcher
from .budget import Slots
from .capacity import Capacity
from .claiming import Claimer
from .dispatch import Dispatcher
from .flow_stage import FlowStage
from .pool import PoolEntrance


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
