"""The hand-off's queues on their own: keys take turns under ``max_per_key``, over every
priority level together."""

from __future__ import annotations

import anyio
import pytest

from streamq.consume.levels import LevelQueue
from streamq.consume.workqueue import FairWorkQueue

pytestmark = pytest.mark.anyio


def key_of(item: tuple[str, int]) -> object:
    return item[0]


async def test_fair_queue_gives_keys_turns_and_holds_a_key_at_its_cap() -> None:
    queue: FairWorkQueue[tuple[str, int]] = FairWorkQueue(1, key_of)
    queue.put_many([("a", 1), ("a", 2), ("b", 1), ("c", 1)])
    taken = [await queue.get() for _ in range(3)]
    assert taken == [("a", 1), ("b", 1), ("c", 1)]
    with anyio.move_on_after(0.05) as waited:
        await queue.get()  # "a" runs its cap: its next entry waits
    assert waited.cancelled_caught
    queue.done("a")
    assert await queue.get() == ("a", 2)


async def test_level_queue_caps_a_key_over_the_levels_and_keeps_their_order() -> None:
    queue: LevelQueue[tuple[str, int]] = LevelQueue(3, 1, key_of)
    queue.put_at(2, [("a", 20), ("b", 20)])
    queue.put_at(0, [("a", 0), ("a", 1)])
    assert await queue.get() == ("a", 0)  # the high level first
    assert await queue.get() == ("b", 20)  # "a" is at its cap on every level
    with anyio.move_on_after(0.05) as waited:
        await queue.get()
    assert waited.cancelled_caught
    queue.done("a")
    assert await queue.get() == ("a", 1)
    queue.done("a")
    assert await queue.get() == ("a", 20)
    assert len(queue) == 0
    queue.close()
    with pytest.raises(anyio.EndOfStream):
        await queue.get()


async def test_level_queue_without_a_cap_takes_weighted_rounds() -> None:
    queue: LevelQueue[tuple[str, int]] = LevelQueue(2)  # weights 2, 1
    queue.put_at(1, [("low", n) for n in range(3)])
    queue.put_at(0, [("high", n) for n in range(4)])
    taken = [(await queue.get())[0] for _ in range(6)]
    assert taken == ["high", "high", "low", "high", "high", "low"]
