"""``FlowGate``: the one object through which the consumer engine asks flow control —
pause, throttles, rate limits — for one group of a topic."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, RateLimit, Throttle
from streamq.flow.gate import FlowGate
from streamq.flow.limiter import Grant
from streamq.flow.pause import pause
from streamq.flow.settings import FlowConfig
from streamq.wire.client import connect
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

CONFIG = FlowConfig.of({"email": RateLimit(10, per=60, by="key"), "sms": RateLimit(100)})


def message(type_name: str, key: str | None) -> Message[Any]:
    return Message("1-0", type_name, {}, {}, 1, "s", "g", key=key)


async def test_a_type_without_limit_is_granted_everything_without_a_round_trip() -> None:
    deployment = connect("redis://127.0.0.1:1/0")  # nothing listens there
    gate = FlowGate(deployment.client_for("s"), "s", "g", CONFIG)
    assert not gate.limited("order") and gate.key_of(message("order", "k")) is None
    assert await gate.take("order", None, 25) == Grant(25, 0.0)
    await deployment.aclose()


async def test_a_limited_type_takes_permits_under_the_key_of_its_limit(
    raw: aioredis.Redis, stream: str
) -> None:
    gate = FlowGate(raw, stream, "g", CONFIG)
    assert gate.limited("email") and gate.key_of(message("email", "alice")) == "alice"
    assert gate.key_of(message("sms", "alice")) is None  # limited as a whole type
    assert (await gate.take("email", "alice", 3)).granted == 1  # 10 a minute: burst 1
    assert (await gate.take("email", "alice", 1)).granted == 0
    assert (await gate.take("email", "bob", 1)).granted == 1
    assert (await gate.take("sms", None, 10)).granted == 5  # burst: 5% of 100


async def test_a_throttle_a_handler_raises_holds_its_key_or_its_type_back(
    raw: aioredis.Redis, stream: str
) -> None:
    gate = FlowGate(raw, stream, "g", CONFIG)
    assert await gate.throttle("email", "alice", Throttle(30)) == 30.0
    found = await gate.throttled("email", ["alice", "bob"])
    assert found["alice"] > 29 and found["bob"] == 0.0
    await gate.throttle("sms", "anyone", Throttle(10, scope="type"))
    assert all(s > 9 for s in (await gate.throttled("sms", ["a", None])).values())


async def test_the_gate_knows_what_is_paused_once_running(raw: aioredis.Redis, stream: str) -> None:
    await pause(raw, stream, "g", "email")
    changes: list[int] = []
    gate = FlowGate(raw, stream, "g", CONFIG, on_change=lambda: changes.append(1))
    async with anyio.create_task_group() as tg:
        await tg.start(gate.run)
        assert gate.paused("email") and not gate.paused("sms")
        await pause(raw, stream, "g")
        await wait_for(lambda: gate.paused("sms"), timeout=5, what="the whole group")
        tg.cancel_scope.cancel()
    assert len(changes) == 2
