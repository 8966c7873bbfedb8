"""The consumer of a partitioned topic: one :class:`Consumer` per partition stream, run
together as one, with one pool of workers.

Each partition's consumer reads its own stream (one blocking XREADGROUP per partition:
never a read across slots), claims, acks, dead-letters and follows stop/resume notices
on that stream's slot. They share one process's limits (:class:`SharedLimits`): one
in-flight budget, one set of handler slots, and one pool of ``concurrency`` workers
(:class:`SharedPool`, run here) that process every partition's entries, so
``max_in_flight`` and ``concurrency`` hold for the topic as a whole and idle workers do not
grow with the partitions. A stop stops them all at once (the pool drains when every
partition has stopped enqueueing); the first one to stop on its own (the topic
terminated, an error) stops the others, and its reason is the topic's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import TaskStatus

from .consumer import Consumer
from .lifecycle import Lifecycle
from .pool import SharedPool
from .stats import merged_snapshots


class PartitionedConsumer(Lifecycle):
    """Several partition consumers, seen from MessageQueue as one consumer."""

    def __init__(self, parts: Sequence[Consumer], pool: SharedPool) -> None:
        super().__init__(f"the partitions of consumer {parts[0].id.consumer}")
        self.parts = list(parts)
        self._pool = pool

    def _on_stop(self) -> None:
        for part in self.parts:
            part.request_stop(self.stop_reason or "stopped", auto=self.auto_stopped)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            # a dead worker stops the topic like a partition's own part dying
            await tg.start(self._pool.run, self.parts[0].died)
            for part in self.parts:
                await tg.start(part.run)
                tg.start_soon(self._stop_all_with, part)
            task_status.started()
            self.reading = True  # every partition reads, until the first one stops
        self.reading = False

    async def _stop_all_with(self, part: Consumer) -> None:
        """Once ``part`` stops, all stop at once: the shared pool drains only when every
        partition has stopped enqueueing."""
        await part.stop_requested.wait()
        self.reading = False
        if self.stop_reason is None:  # this partition stopped first: its reason is ours
            self.error = part.error
        self.request_stop(part.stop_reason or "stopped", auto=part.auto_stopped)

    def stats_report(self) -> dict[str, Any]:
        """The partitions' counters, gauges and histograms added up: one consumer's
        figures, whichever partition handled an entry."""
        reports = [part.stats_report() for part in self.parts]
        total = dict(reports[0])
        for report in reports[1:]:
            for name, value in report.items():
                if isinstance(value, dict):
                    total[name] = merged_snapshots(total[name], value)
                elif isinstance(value, int) and not isinstance(value, bool):
                    total[name] += value
        total["partitions"] = len(reports)
        return total
