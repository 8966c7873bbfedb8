"""What a shared-mode consumer holds in its pending list on purpose (the claimer's
``held``): failed entries left for redelivery are held for ``claim_idle`` and then
forgotten (anyone may claim them then), so the record stays as small as the recent
failures; ``Retry`` entries are held until they are taken back."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConsumerConfig
from streamq.consume.capacity import Capacity
from streamq.consume.claiming import Claimer
from streamq.message import RawEntry

pytestmark = pytest.mark.anyio


def claimer(client: aioredis.Redis, stream: str, claim_idle: float) -> Claimer:
    async def nothing(*_: Any) -> None:
        return None

    return Claimer(
        client, stream=stream, group="g", consumer="c",
        config=ConsumerConfig(claim_idle=claim_idle), capacity=Capacity(100, 10),
        enqueue=nothing, on_group_lost=nothing,
    )  # fmt: skip


async def test_failed_entries_are_held_for_claim_idle_then_forgotten(
    client: aioredis.Redis, stream: str
) -> None:
    holder = claimer(client, stream, claim_idle=0.3)
    for n in range(3):
        holder.left_pending(f"{n}-0")
    assert holder.held() == {"0-0", "1-0", "2-0"}
    await anyio.sleep(0.35)
    holder.left_pending("3-0")  # a new failure forgets the ones past claim_idle
    assert list(holder._left) == ["3-0"], "failures past claim_idle are still recorded"
    holder.retry_later(RawEntry("4-0", {b"type": b"job"}), delay=60)
    assert holder.held() == {"3-0", "4-0"}
