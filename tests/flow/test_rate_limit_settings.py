"""Where rate limits are given (``MessageQueue(rate_limits=)``, ``rate=`` with a handler or
a batch handler, a Router's), how they are checked, and the ``FlowConfig`` the consumer
engine reads. Nothing here needs a server: every check runs before one is reached."""

from __future__ import annotations

from typing import Any

import pytest

from streamq import App, ConfigError, Message, MessageQueue, RateLimit, Router

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens: a check that connected would fail


def queue(**options: Any) -> MessageQueue:
    return MessageQueue(NOWHERE, stream="s", **options)


async def noop(msg: Message[Any]) -> None:
    return None


async def noop_batch(msgs: list[Message[Any]]) -> None:
    return None


def test_limits_given_to_the_queue_and_with_handlers_are_gathered() -> None:
    mq = queue(rate_limits={"email": RateLimit(100)})
    mq.handler("email")(noop)
    mq.handler("sms", rate=RateLimit(10, by="key"))(noop)
    mq.batch_handler("order", size=10, rate=RateLimit(50, per=2))(noop_batch)
    config = mq.flow_config
    assert config.limit_of("email") == RateLimit(100)
    assert config.limit_of("sms") == RateLimit(10, by="key")
    assert config.limit_of("order") == RateLimit(50, per=2)
    assert config.limit_of("other") is None
    assert mq.rate_limits == config.rate_limits
    with pytest.raises(TypeError):
        config.rate_limits["x"] = RateLimit(1)  # type: ignore[index]


def test_a_router_s_limits_come_with_its_handlers() -> None:
    router = Router()
    router.handler("email", rate=RateLimit(5))(noop)
    router.batch_handler("order", rate=RateLimit(7))(noop_batch)
    assert dict(router.rate_limits) == {"email": RateLimit(5), "order": RateLimit(7)}
    mq = queue()
    mq.include_router(router)
    assert mq.flow_config.limit_of("email") == RateLimit(5)
    assert mq.flow_config.limit_of("order") == RateLimit(7)
    outer = Router()
    outer.include_router(router)  # a router of routers keeps them too
    assert outer.rate_limits == router.rate_limits


def test_an_app_s_routers_bring_their_limits_to_its_queue() -> None:
    router = Router()
    router.handler("email", rate=RateLimit(5))(noop)
    mq = queue()
    App(mq, routers=[router])
    assert mq.flow_config.limit_of("email") == RateLimit(5)


def test_two_different_limits_for_one_type_are_refused_and_nothing_is_registered() -> None:
    mq = queue(rate_limits={"email": RateLimit(100)})
    with pytest.raises(ConfigError, match="'email' has two rate limits"):
        mq.handler("email", rate=RateLimit(10))(noop)
    assert "email" not in mq.route_table
    mq.handler("email", rate=RateLimit(100))(noop)  # the same limit again: one limit
    with pytest.raises(ConfigError, match="'email' has two rate limits"):
        mq.batch_handler("email", rate=RateLimit(1))(noop_batch)
    router = Router()
    router.handler("email", rate=RateLimit(3))(noop)
    with pytest.raises(ConfigError, match="'email' has two rate limits"):
        mq.include_router(router)
    assert mq.flow_config.limit_of("email") == RateLimit(100)


@pytest.mark.parametrize(
    ("rate_limits", "says"),
    [
        (["email"], "rate_limits must map message types to RateLimits"),
        ({"email": 100}, r"rate_limits\['email'\] must be a streamq.RateLimit"),
        ({"bad type": RateLimit(1)}, "rate_limits: .*bad type"),
        ({3: RateLimit(1)}, "rate_limits: "),
    ],
)
def test_bad_rate_limits_are_refused_when_the_queue_is_built(rate_limits: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        queue(rate_limits=rate_limits)


def test_a_handler_rate_that_is_no_rate_limit_is_refused_at_the_decorator() -> None:
    mq = queue()
    with pytest.raises(ConfigError, match=r"handler rate must be a streamq\.RateLimit"):
        mq.handler("email", rate=100)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"batch_handler rate must be a streamq\.RateLimit"):
        Router().batch_handler("email", rate={"limit": 1})  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_limit_on_a_type_without_handler_is_refused_when_the_consumer_starts() -> None:
    mq = queue(rate_limits={"emial": RateLimit(100)})  # a typo
    mq.handler("email")(noop)
    with pytest.raises(ConfigError, match="rate limit on 'emial' but no handler for it"):
        await mq.run()
    with pytest.raises(ConfigError, match=r"handled types: email\)"):
        async with mq.running():
            pass


def test_rate_limits_on_a_fan_out_queue_are_refused() -> None:
    with pytest.raises(ConfigError, match="rate limits need a consumer group"):
        queue(group=None, rate_limits={"email": RateLimit(1)})


@pytest.mark.anyio
async def test_a_handler_s_limit_on_a_fan_out_queue_is_refused_when_it_starts() -> None:
    mq = queue(group=None)
    mq.handler("email", rate=RateLimit(1))(noop)
    with pytest.raises(ConfigError, match=r"fan-out queue .* 'email' would be limited for nobody"):
        await mq.run()
