"""Rate limits: ``RateLimit``'s checks when it is defined, and the server-side limiter
(GCRA in one script on the topic's slot) that every consumer of a group draws from:
accuracy under concurrent takers, batches, keys on their own, expiry, damaged state."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, Message, RateLimit
from streamq.flow.limiter import Grant, RateLimiter
from streamq.wire.client import connect
from streamq.wire.damage import damaged_counts

pytestmark = pytest.mark.anyio


# -- the definition -------------------------------------------------------------------
def test_a_rate_limit_normalises_its_period_and_defaults_its_burst() -> None:
    limit = RateLimit(100, per=timedelta(milliseconds=500))
    assert (limit.limit, limit.per, limit.by, limit.burst) == (100, 0.5, None, 5)
    assert limit.interval == pytest.approx(0.005)
    assert RateLimit(10, by="key").burst == 1  # 5% of 10, at least one
    assert RateLimit(3, per=2).per == 2.0 and isinstance(RateLimit(3, per=2).per, float)


@pytest.mark.parametrize("limit", [0, -5, 1.5, 2.0, True, "10", None])
def test_a_limit_that_is_no_positive_integer_is_refused(limit: Any) -> None:
    with pytest.raises(ConfigError, match="limit must be an integer >= 1"):
        RateLimit(limit)


def test_a_fractional_limit_is_told_how_to_say_it() -> None:
    with pytest.raises(ConfigError, match=r"RateLimit\(1, per=2.0\) is one every 2 s"):
        RateLimit(0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("per", "says"),
    [
        (0, "> 0 seconds"),
        (-1.0, "> 0 seconds"),
        (timedelta(0), "> 0 seconds"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ("1", "convert it first"),
        (True, "number of seconds or a timedelta"),
        (86_401, "at most 86400 s"),
    ],
)
def test_a_period_that_is_not_positive_or_too_long_is_refused(per: Any, says: str) -> None:
    with pytest.raises(ConfigError, match="RateLimit per") as raised:
        RateLimit(10, per=per)
    assert says in str(raised.value)


@pytest.mark.parametrize("by", ["keys", "tenant", 3, str, object()])
def test_an_unknown_by_is_refused_naming_the_choices(by: Any) -> None:
    with pytest.raises(ConfigError, match=r"None .* 'key' .* or a function of the message"):
        RateLimit(10, by=by)


@pytest.mark.parametrize("burst", [0, 11, -1, 2.0, True])
def test_a_burst_outside_one_to_the_limit_is_refused(burst: Any) -> None:
    with pytest.raises(ConfigError, match=r"burst must be an integer from 1 to the limit \(10\)"):
        RateLimit(10, burst=burst)


def test_a_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        RateLimit(0)


def test_the_key_a_message_is_limited_under() -> None:
    msg: Message[Any] = Message("1-0", "email", {}, {"tenant": "t7"}, 1, "s", "g", key="k1")
    keyless: Message[Any] = Message("1-1", "email", {}, {}, 1, "s", "g")
    assert RateLimit(10).key_of(msg) is None
    assert RateLimit(10, by="key").key_of(msg) == "k1"
    assert RateLimit(10, by="key").key_of(keyless) is None
    assert RateLimit(10, by=lambda m: m.meta["tenant"]).key_of(msg) == "t7"
    assert RateLimit(10, by=lambda m: len(m.meta)).key_of(msg) == "1"  # as text
    assert RateLimit(10, by=lambda m: None).key_of(msg) is None


# -- the limiter ----------------------------------------------------------------------
async def taker(
    url: str,
    stream: str,
    limiter: RateLimiter,
    grants: list[float],
    seconds: float,
    key: str | None = None,
) -> None:
    """Take 4 permits at a time for ``seconds`` on a connection of its own, sleeping as
    told when short; each permit's time goes into ``grants``."""
    deployment = connect(url)
    client = deployment.client_for(stream)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            grant = await limiter.take(client, stream, "g", "email", key, 4)
            grants.extend([time.monotonic()] * grant.granted)
            if grant.granted < 4:
                await anyio.sleep(grant.wait_seconds)
    finally:
        await deployment.aclose()


def most_in_any_window(times: list[float], window: float) -> int:
    times = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.parametrize(("burst", "least"), [(None, 270), (1, 200)])
async def test_three_concurrent_takers_share_one_limit_and_no_second_exceeds_it(
    redis_url: str, stream: str, burst: int | None, least: int
) -> None:
    limit = RateLimit(100, burst=burst)
    limiter, grants = RateLimiter(limit), list[float]()
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(taker, redis_url, stream, limiter, grants, 3.0)
    # 100/s for 3 s, the burst at the start. With a burst, a taker that comes late for its
    # permit catches up; with burst=1 each permit is taken a round trip after it is due,
    # so the rate reached is lower (the price of never more than the limit in a window)
    assert least <= len(grants) <= 300 + limit.burst, len(grants)
    # in any window of one second, at most limit + burst - 1 (plus one: each time here is
    # taken when the reply arrives, not when the server granted it)
    assert most_in_any_window(grants, 1.0) <= 100 + limit.burst - 1 + 1


async def test_a_batch_takes_up_to_the_burst_at_once_then_waits_for_the_next_permit(
    raw: aioredis.Redis, stream: str
) -> None:
    limiter = RateLimiter(RateLimit(100, burst=20))
    grant = await limiter.take(raw, stream, "g", "order", None, 50)
    assert grant.granted == 20
    assert 0.005 < grant.wait_seconds <= 0.010  # the next permit: one interval (10 ms)
    assert (await limiter.take(raw, stream, "g", "order", None, 1)).granted == 0
    since = time.monotonic()
    await anyio.sleep(0.06)
    granted = (await limiter.take(raw, stream, "g", "order", None, 50)).granted
    assert 4 <= granted <= (time.monotonic() - since) / 0.01 + 1  # one per 10 ms since


async def test_a_take_within_the_limit_is_granted_whole_with_no_wait(
    raw: aioredis.Redis, stream: str
) -> None:
    # A permit every 0.6 s: the time between the two takes refills none, however slow
    # the machine (a limit of 1000/s would refill one permit per millisecond between them).
    limiter = RateLimiter(RateLimit(1000, per=600, burst=50))
    assert await limiter.take(raw, stream, "g", "order", None, 10) == Grant(10, 0.0, left=40)
    most = await limiter.take(raw, stream, "g", "order", None, 45)  # the burst's rest: 40
    assert (most.granted, most.left) == (40, 0) and 0 < most.wait_seconds <= 0.6


async def test_each_key_has_its_own_limit_and_the_keyless_share_one(
    raw: aioredis.Redis, stream: str
) -> None:
    limiter = RateLimiter(RateLimit(1, per=10, by="key"))  # one now, the next in 10 s
    first = await limiter.take(raw, stream, "g", "email", "alice", 5)
    assert first.granted == 1 and 9.9 <= first.wait_seconds <= 10
    assert (await limiter.take(raw, stream, "g", "email", "alice", 1)).granted == 0
    for key in ("bob", None, ""):  # other keys, the keyless entries, an empty key: untouched
        assert (await limiter.take(raw, stream, "g", "email", key, 1)).granted == 1
    assert (await limiter.take(raw, stream, "g", "email", None, 1)).granted == 0
    # another group and another type are other limits
    assert (await limiter.take(raw, stream, "g2", "email", "alice", 1)).granted == 1
    assert (await limiter.take(raw, stream, "g", "sms", "alice", 1)).granted == 1


async def test_keys_over_their_limit_concurrently_each_get_their_own_rate(
    redis_url: str, stream: str
) -> None:
    limiter = RateLimiter(RateLimit(20, by="key"))
    grants: dict[str, list[float]] = {"a": [], "b": []}
    async with anyio.create_task_group() as tg:
        for key, into in grants.items():
            tg.start_soon(taker, redis_url, stream, limiter, into, 2.0, key)
    for into in grants.values():
        assert 30 <= len(into) <= 41  # 20/s each for 2 s, one permit at start
        assert most_in_any_window(into, 1.0) <= 20 + 1


async def test_an_idle_limiter_leaves_nothing_behind(raw: aioredis.Redis, stream: str) -> None:
    limiter = RateLimiter(RateLimit(10, per=1.0, by="key"))
    await limiter.take(raw, stream, "g", "email", "alice", 1)
    key = limiter.key(stream, "g", "email", "alice")
    assert 0 < await raw.pttl(key) <= 100  # expires at its next permit's time
    await anyio.sleep(0.15)
    assert not await raw.exists(key)
    assert (await limiter.take(raw, stream, "g", "email", "alice", 1)).granted == 1


async def test_limiter_keys_are_on_the_topic_slot_and_unambiguous(stream: str) -> None:
    limiter = RateLimiter(RateLimit(10, by="key"))
    assert limiter.key(stream, "g", "email", "k") == f"streamq:{{{stream}}}:rate:1:g:5:email:key:k"
    assert limiter.key(stream, "g", "email", None) == f"streamq:{{{stream}}}:rate:1:g:5:email:none"
    whole = RateLimiter(RateLimit(10))
    assert whole.key(stream, "g", "email", "ignored") == f"streamq:{{{stream}}}:rate:1:g:5:email"
    # group "a:b" with type "c" is not group "a" with type "b:c"
    assert whole.key(stream, "a:b", "c", None) != whole.key(stream, "a", "b:c", None)


@pytest.mark.parametrize("count", [0, -1, 1.0, True])
async def test_a_take_of_no_permit_is_refused(raw: aioredis.Redis, stream: str, count: Any) -> None:
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        await RateLimiter(RateLimit(10)).take(raw, stream, "g", "email", None, count)


@pytest.mark.parametrize(
    ("damage", "shown"),
    [
        (("set", "not a time"), "'not a time'"),
        (("set", "99999999999999999999"), "'99999999999999999999'"),  # centuries ahead
        (("hset", "f"), "'a hash'"),
    ],
)
async def test_a_damaged_limiter_state_is_logged_once_counted_and_replaced(
    raw: aioredis.Redis,
    stream: str,
    caplog: pytest.LogCaptureFixture,
    damage: tuple[str, str],
    shown: str,
) -> None:
    limiter = RateLimiter(RateLimit(10))
    key = limiter.key(stream, "g", "email", None)
    before = damaged_counts().get("rate", 0)
    for _ in range(2):  # the same damage twice: logged once
        await raw.delete(key)
        if damage[0] == "set":
            await raw.set(key, damage[1])
        else:
            await raw.hset(key, damage[1], "x")
        with caplog.at_level(logging.ERROR):
            grant = await limiter.take(raw, stream, "g", "email", None, 1)
        assert grant.granted == 1  # the limit starts afresh, nothing stuck
        assert await raw.type(key) == b"string" and 0 < await raw.pttl(key) <= 100
    logged = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(logged) == 1 and shown in logged[0] and "damaged rate record" in logged[0]
    assert damaged_counts()["rate"] == before + 1


async def test_a_state_from_a_slower_limit_is_brought_back_not_obeyed_for_hours(
    raw: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    slow = RateLimiter(RateLimit(1, per=3600, burst=1))
    await slow.take(raw, stream, "g", "email", None, 1)  # the next permit in an hour
    fast = RateLimiter(RateLimit(100, burst=1))  # the limit changed to 100/s
    grant = await fast.take(raw, stream, "g", "email", None, 1)
    assert grant.granted == 0 and grant.wait_seconds <= 0.02
    granted = 0
    for _ in range(20):  # waiting as told, permits come at the new rate
        await anyio.sleep(grant.wait_seconds)
        grant = await fast.take(raw, stream, "g", "email", None, 1)
        granted += grant.granted
    assert granted >= 15, f"{granted} of 20 takes granted at 100/s after the limit was raised"
    assert "damaged" not in caplog.text  # a limit changed, nothing damaged


async def test_the_limiter_works_on_the_topic_slot_of_a_node_and_of_a_cluster(
    where: str, topic: str
) -> None:
    deployment = connect(where)
    try:
        client = deployment.client_for(topic)
        limiter = RateLimiter(RateLimit(50, per=60, by="key"))  # burst 2, then one per 1.2 s
        for key in ("a", "b", None):
            assert (await limiter.take(client, topic, "g", "email", key, 5)).granted == 2
            assert (await limiter.take(client, topic, "g", "email", key, 5)).granted == 0
        assert await client.exists(limiter.key(topic, "g", "email", "a"))
    finally:
        await deployment.aclose()
