"""Permits taken ahead (:mod:`streamq.flow.credit`): under a limit far from binding a
consumer's reads use permits in hand, taken in the background; near the limit every read
asks the server, so the limit holds as without credit."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import RateLimit
from streamq.flow.credit import AHEAD, Credit
from streamq.flow.limiter import Grant, RateLimiter

pytestmark = pytest.mark.anyio


class ServerTakes:
    """The server's limiter of type ``email``, counting the takes that reach it."""

    def __init__(self, client: aioredis.Redis, stream: str, rate: RateLimit) -> None:
        self.limiter, self.client, self.stream = RateLimiter(rate), client, stream
        self.calls, self.granted = 0, 0

    async def __call__(self, type_name: str, count: int) -> Grant:
        self.calls += 1
        grant = await self.limiter.take(self.client, self.stream, "g", type_name, None, count)
        self.granted += grant.granted
        return grant


async def test_far_from_its_limit_a_read_uses_permits_in_hand(
    raw: aioredis.Redis, stream: str
) -> None:
    server = ServerTakes(raw, stream, RateLimit(1_000_000))  # burst 50,000
    credit = Credit(server)
    async with anyio.create_task_group() as tg:
        tg.start_soon(credit.run)
        assert (await credit.take("email", 100)).granted == 100  # the first asks the server
        for _ in range(20):
            await anyio.sleep(0.01)  # the permits ahead come in the background
            calls = server.calls
            assert (await credit.take("email", 100)).granted == 100
            assert server.calls == calls, "a read with permits in hand asked the server"
        tg.cancel_scope.cancel()
    used = 21 * 100
    assert used < server.granted <= used + AHEAD * 100, "at most AHEAD reads' worth in hand"


async def test_near_its_limit_every_read_asks_the_server(raw: aioredis.Redis, stream: str) -> None:
    server = ServerTakes(raw, stream, RateLimit(100, burst=20))  # a few reads of 10 a burst
    credit = Credit(server)
    granted = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(credit.run)
        for _ in range(5):
            granted += (await credit.take("email", 10)).granted
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert server.calls == 5, "permits were taken ahead of a limit close to binding"
    assert granted == server.granted <= 20 + 5, "no more than the burst and the rate allow"
