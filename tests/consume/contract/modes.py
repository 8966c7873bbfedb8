"""The consumer modes the contract suite runs against, and what its tests share.

Modes: ``shared`` (a consumer group, the default), ``ordered`` (``ordered=True``),
``fanout`` (``group=None``), and ``shared-p2``/``ordered-p2`` (the same on a topic of
two partitions). A test skips a mode only where a document says that mode does not do
the thing (``Mode.skip_unless``), and marks with a strict xfail a difference between modes
that no document states (``Mode.differs``): those are decisions left to the engine's
rebuild (DESIGN.md, "One consumer engine").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from streamq import MessageQueue, RetryPolicy
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

# Ordered mode's lease: short, so that a member acquires and hands over quickly.
LEASE = 2.0

# Every mode, and the three kinds of consumer they are.
MODES = ("shared", "ordered", "fanout", "shared-p2", "ordered-p2")
KINDS = ("shared", "ordered", "fanout")

# Where the documents say what fan-out does not do.
FANOUT_DOC = "docs/guides/services.md 'Fan-out subscribers', ERROR_HANDLING.md (group=None rows)"

# In-process retries quick enough for tests; redeliveries as fast as claim_idle allows.
QUICK_RETRY = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, jitter=0.0)


@dataclass(frozen=True)
class Mode:
    """One consumer mode: how to build its queues, and what the documents say it does."""

    name: str
    make_queue: QueueFactory
    stream: str
    request: pytest.FixtureRequest

    @property
    def kind(self) -> str:
        """``shared``, ``ordered`` or ``fanout``, whatever the partitions."""
        return self.name.removesuffix("-p2")

    @property
    def partitions(self) -> int:
        return 2 if self.name.endswith("-p2") else 1

    @property
    def grouped(self) -> bool:
        """Whether the mode reads through a consumer group (fan-out does not)."""
        return self.kind != "fanout"

    def options(self) -> dict[str, Any]:
        """The settings that make a queue of this mode."""
        options: dict[str, Any] = {"partitions": self.partitions}
        if self.kind == "ordered":
            options.update(ordered=True, ownership_lease=LEASE)
        if self.kind == "fanout":
            options.update(group=None)
        return options

    def queue(self, **options: Any) -> MessageQueue:
        """A queue of this mode on the test's stream (EARLIEST, test timings), closed
        after the test; ``options`` add to or replace the mode's settings."""
        return self.make_queue(**{**self.options(), **options})

    def skip_unless(self, *kinds: str, does_not: str, where: str) -> None:
        """Skip this test for a mode outside ``kinds``, citing the document that says the
        mode does not do it."""
        if self.kind not in kinds:
            pytest.skip(f"{self.kind} does not {does_not}: {where}")

    def differs(self, *names: str, reason: str) -> None:
        """Mark this test an expected failure (strict) for the modes or kinds ``names``:
        a difference between modes that no document states."""
        if self.name in names or self.kind in names:
            mark = pytest.mark.xfail(strict=True, reason=f"undocumented difference: {reason}")
            self.request.applymarker(mark)


async def pending(mq: MessageQueue) -> int:
    """Entries of ``mq``'s group pending over every partition (0 without a group)."""
    if mq.group is None:
        return 0
    return (await mq.topic_info()).pending


async def all_acked(mq: MessageQueue) -> None:
    """Wait until nothing of ``mq``'s group is pending (acks are coalesced: they follow
    the handlers by a flush)."""

    async def none_pending() -> bool:
        return await pending(mq) == 0

    await wait_for(none_pending, what="every entry acknowledged")


def keys(count: int) -> list[str]:
    """``count`` publish keys: distinct keys run concurrently in ordered mode too."""
    return [f"key-{n}" for n in range(count)]
