"""Throttles: the ``Throttle`` signal's checks, and the expiring records that hold a key
(or a whole type) back in a group across every consumer."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, StartFrom, Throttle
from streamq.flow.throttle import throttle, throttle_key, throttled_for, throttled_keys
from streamq.signals import HandlerSignal
from streamq.wire.client import connect
from streamq.wire.damage import damaged_counts
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


# -- the signal -----------------------------------------------------------------------
def test_a_throttle_normalises_its_wait_and_keeps_its_scope() -> None:
    signal = Throttle(retry_after=timedelta(minutes=2), scope="type")
    assert (signal.retry_after, signal.scope) == (120.0, "type")
    assert Throttle(30).scope == "key" and Throttle(30).retry_after == 30.0
    assert isinstance(signal, HandlerSignal) and not isinstance(signal, ConfigError)


@pytest.mark.parametrize(
    ("retry_after", "says"),
    [
        (0, "more than 0"),
        (-3, "more than 0"),
        (timedelta(seconds=-1), "more than 0"),
        (float("nan"), "more than 0"),
        (float("inf"), "more than 0"),
        (86_401, "at most 86400 seconds"),
        ("30", "convert it first, float(...)"),
        (None, "a number of seconds or a timedelta"),
        (True, "a number of seconds or a timedelta"),
    ],
)
def test_a_wait_that_is_no_positive_number_is_refused(retry_after: Any, says: str) -> None:
    with pytest.raises(ConfigError, match="Throttle retry_after") as raised:
        Throttle(retry_after)
    assert says in str(raised.value)


@pytest.mark.parametrize("scope", ["group", "keys", None, ""])
def test_an_unknown_scope_is_refused(scope: Any) -> None:
    with pytest.raises(ConfigError, match=r"Throttle scope must be 'key' .* or 'type'"):
        Throttle(5, scope=scope)


# -- the records ----------------------------------------------------------------------
async def test_a_throttled_key_waits_and_the_other_keys_do_not(
    raw: aioredis.Redis, stream: str
) -> None:
    assert await throttle(raw, stream, "g", "email", "alice", 30) == 30.0
    assert 29 < await throttled_for(raw, stream, "g", "email", "alice") <= 30
    for key in ("bob", None, ""):
        assert await throttled_for(raw, stream, "g", "email", key) == 0.0
    assert await throttled_for(raw, stream, "g2", "email", "alice") == 0.0  # another group
    assert await throttled_for(raw, stream, "g", "sms", "alice") == 0.0  # another type


async def test_the_keyless_entries_are_throttled_together_apart_from_the_type(
    raw: aioredis.Redis, stream: str
) -> None:
    await throttle(raw, stream, "g", "email", None, 30)
    assert await throttled_for(raw, stream, "g", "email", None) > 29
    assert await throttled_for(raw, stream, "g", "email", "alice") == 0.0


async def test_a_throttled_type_holds_back_every_key(raw: aioredis.Redis, stream: str) -> None:
    await throttle(raw, stream, "g", "email", "ignored", 20, scope="type")
    found = await throttled_keys(raw, stream, "g", "email", ["a", "b", None, "a"])
    assert set(found) == {"a", "b", None}
    assert all(19 < seconds <= 20 for seconds in found.values())
    await throttle(raw, stream, "g", "email", "a", 40)  # a key throttled longer: its own
    assert (await throttled_keys(raw, stream, "g", "email", ["a", "b"]))["a"] > 39


async def test_throttling_again_keeps_the_longer_wait(raw: aioredis.Redis, stream: str) -> None:
    await throttle(raw, stream, "g", "email", "alice", 30)
    assert await throttle(raw, stream, "g", "email", "alice", 1) > 29  # the longer stays
    assert await throttled_for(raw, stream, "g", "email", "alice") > 29
    assert await throttle(raw, stream, "g", "email", "alice", 60) == 60.0  # a longer one wins


async def test_a_throttle_ends_by_itself_and_leaves_nothing_behind(
    raw: aioredis.Redis, stream: str
) -> None:
    await throttle(raw, stream, "g", "email", "alice", 0.2)
    key = throttle_key(stream, "g", "email", "alice")
    assert 0 < await raw.pttl(key) <= 200
    await anyio.sleep(0.3)
    assert await throttled_for(raw, stream, "g", "email", "alice") == 0.0
    assert not await raw.exists(key)


async def test_throttle_keys_are_on_the_topic_slot_and_unambiguous(stream: str) -> None:
    prefix = f"streamq:{{{stream}}}:throttle:"
    assert throttle_key(stream, "g", "email", "k") == prefix + "1:g:5:email:key:k"
    assert throttle_key(stream, "g", "email", None) == prefix + "1:g:5:email:none"
    assert throttle_key(stream, "g", "email", "k", "type") == prefix + "1:g:5:email"
    assert throttle_key(stream, "a:b", "c", None, "type") != throttle_key(
        stream, "a", "b:c", None, "type"
    )
    assert throttle_key(stream, "g", "a", "key:b") != throttle_key(stream, "g", "a:key", "b")


@pytest.mark.parametrize("expiry", ["none", "two days"])
async def test_a_throttle_record_streamq_did_not_write_is_logged_once_and_not_obeyed(
    raw: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture, expiry: str
) -> None:
    key = throttle_key(stream, "g", "email", None, "type")
    await raw.set(key, "forever")
    if expiry == "two days":
        await raw.pexpire(key, 2 * 86_400_000)
    before = damaged_counts().get("throttle", 0)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert await throttled_for(raw, stream, "g", "email", "alice") == 0.0
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1 and "damaged throttle record" in logged[0]
    assert "not obeyed" in logged[0]
    assert damaged_counts()["throttle"] == before + 1
    # throttling it replaces a record without expiry (a longer one stays, as any longer one)
    lasts = await throttle(raw, stream, "g", "email", None, 5, scope="type")
    assert lasts == 5.0 if expiry == "none" else lasts > 86_400


async def test_throttles_work_on_the_topic_slot_of_a_node_and_of_a_cluster(
    where: str, topic: str
) -> None:
    deployment = connect(where)
    try:
        client = deployment.client_for(topic)
        await throttle(client, topic, "g", "email", "a", 10)
        await throttle(client, topic, "g", "sms", None, 10, scope="type")
        found = await throttled_keys(client, topic, "g", "email", ["a", "b"])
        assert found["a"] > 9 and found["b"] == 0.0
        assert await throttled_for(client, topic, "g", "sms", "anything") > 9
    finally:
        await deployment.aclose()


# -- where a throttle cannot be -------------------------------------------------------
async def test_a_throttle_from_a_fan_out_handler_is_a_failure_saying_it_needs_a_group(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    mq = make_queue(group=None, start=StartFrom.EARLIEST)
    calls: list[int] = []

    @mq.handler("call")
    async def call(msg: Message[int]) -> None:
        calls.append(msg.data)
        raise Throttle(retry_after=30)

    async with mq:
        await mq.publish("call", 1)
        async with mq.running():
            await wait_for(lambda: mq.stats().get("failed") == 1, what="the failure counted")
        stats = mq.stats()
    assert calls == [1], "a fan-out subscriber handled a throttled entry again"
    assert stats["handled"] == 0
    assert "which needs a consumer group" in caplog.text
