"""The requests of one process waiting on one reply stream share one reader
(streamq/publish/requests.py): whichever way the reading request leaves (its reply, its
timeout, a cancel), another waiting request reads on, so no reply waits unread."""

from __future__ import annotations

import uuid

import anyio
import pytest
import redis.asyncio as aioredis

from streamq.publish.requests import ReplyReader, _Waiting
from streamq.wire.keys import Keys

pytestmark = pytest.mark.anyio

ROUNDS = 6  # the waiting requests are a set: each round orders them afresh


async def _a_reply_after_the_reader_left(client: aioredis.Redis, stream: str, leaving: str) -> None:
    key = Keys(stream).replies(uuid.uuid4().hex)  # on the stream's slot, as a reply stream is
    waiting: dict[str, _Waiting] = {}
    reader = ReplyReader(client, key, waiting)
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    waiting[first], waiting[second] = _Waiting(), _Waiting()
    got: dict[str, bytes] = {}
    scopes: dict[str, anyio.CancelScope] = {}

    async def wait(request_id: str, limit: float) -> None:
        with anyio.CancelScope() as scopes[request_id], anyio.move_on_after(limit):
            reply = await reader.wait(request_id, waiting[request_id])
            got[request_id] = reply[b"data"]

    async with anyio.create_task_group() as tg:
        # the first leads the reading, then times out (0.3 s) or is cancelled
        tg.start_soon(wait, first, 30 if leaving == "cancelled" else 0.3)
        await anyio.sleep(0.05)
        tg.start_soon(wait, second, 5)  # waits for its turn
        await anyio.sleep(0.05)
        if leaving == "cancelled":
            scopes[first].cancel()
        await anyio.sleep(0.5)  # the first has left by now; its reply never comes
        await client.xadd(key, {"request": second, "data": "42"})
        with anyio.move_on_after(3):  # far below the second's own 5 s
            while second not in got:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    await client.delete(key)
    assert got == {second: b"42"}


@pytest.mark.parametrize("leaving", ["timed out", "cancelled"])
async def test_a_reply_is_read_after_the_reading_request_left_without_its_own(
    client: aioredis.Redis, stream: str, leaving: str
) -> None:
    for _ in range(ROUNDS):
        await _a_reply_after_the_reader_left(client, stream, leaving)
