"""Request-reply in every mode with a group (DESIGN.md "Effectively-once effects and
request-reply", docs/guides/request-reply.md): the handler's return value is the reply,
written with the request's ack; a handler failing past its limit answers with a
RemoteError; no reply in time is a RequestTimeout; concurrent requests of one process
share one reader of their replies. Fan-out answers nothing (it has no group)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel, ValidationError

from streamq import (
    Keyring,
    Message,
    MessageFormatError,
    RemoteError,
    RequestTimeout,
    RetryPolicy,
    StreamqError,
)
from streamq.wire.keys import Keys
from tests.consume.contract.modes import Mode, all_acked
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

REPLY_DOC = "docs/guides/request-reply.md (a request needs a consumer group)"


class Quote(BaseModel):
    item: str
    count: int


class Price(BaseModel):
    item: str
    total: float


def grouped_only(mode: Mode) -> None:
    mode.skip_unless("shared", "ordered", does_not="answer requests", where=REPLY_DOC)


async def test_the_handlers_return_value_is_the_reply_and_the_request_is_acked(
    mode: Mode,
) -> None:
    grouped_only(mode)
    mq = mode.queue()

    @mq.handler("quote")
    async def quote(msg: Message[Quote]) -> Price:
        return Price(item=msg.data.item, total=msg.data.count * 2.5)

    async with mq.running():
        price = await mq.request("quote", Quote(item="pen", count=4), reply_model=Price,
                                 key="customer-1", timeout=10)  # fmt: skip
        assert price == Price(item="pen", total=10.0)
        plain = await mq.request("quote", Quote(item="ink", count=2), key="customer-2", timeout=10)
        assert plain == {"item": "ink", "total": 5.0}  # no reply_model: the JSON as it is
        await all_acked(mq)
        await wait_for(lambda: mq.stats()["acked"] == 2, what="both acks counted in stats")


async def test_concurrent_requests_each_get_their_own_reply(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue(concurrency=8)

    @mq.handler("square")
    async def square(msg: Message[int]) -> int:
        await anyio.sleep(0.01 * (msg.data % 5))  # replies come back out of order
        return msg.data * msg.data

    results: dict[int, int] = {}

    async def ask(n: int) -> None:
        results[n] = await mq.request("square", n, key=f"k{n}", timeout=10)

    async with mq.running(), anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(ask, n)
    assert results == {n: n * n for n in range(40)}


async def test_a_request_that_fails_past_its_limit_raises_remote_error(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue(retry=RetryPolicy(attempts=1, max_deliveries=1, backoff=0.01, jitter=0))

    @mq.handler("charge")
    async def charge(msg: Message[int]) -> None:
        raise ValueError("card declined")

    async with mq.running():
        with pytest.raises(RemoteError, match="card declined"):
            await mq.request("charge", 12, key="c", timeout=10)
        assert len(await mq.dead_letters()) == 1  # the failure is dead-lettered as always


async def test_a_reply_that_does_not_fit_the_reply_model_is_a_message_format_error(
    mode: Mode,
) -> None:
    grouped_only(mode)
    mq = mode.queue()

    @mq.handler("quote")
    async def quote(msg: Message[Quote]) -> dict[str, int]:
        return {"amount": 3}  # a handler deployed with another reply shape

    async with mq.running():
        with pytest.raises(MessageFormatError) as caught:
            await mq.request("quote", Quote(item="pen", count=1), reply_model=Price,
                             key="c", timeout=10)  # fmt: skip
        await all_acked(mq)  # the request was handled and answered: only its reply is refused
    assert isinstance(caught.value, StreamqError)
    assert isinstance(caught.value.__cause__, ValidationError)
    assert str(caught.value).startswith(
        "the reply to the 'quote' request does not fit reply_model=Price: item: Field required"
    )


async def test_no_reply_in_time_is_a_request_timeout(mode: Mode) -> None:
    grouped_only(mode)
    mq = mode.queue()

    @mq.handler("slow")
    async def slow(msg: Message[int]) -> int:
        await anyio.sleep(2)
        return 1

    async with mq.running():
        with anyio.fail_after(5):
            with pytest.raises(RequestTimeout, match=r"within 0\.3 s"):
                await mq.request("slow", 1, key="s", timeout=0.3)


async def test_the_reply_stream_expires(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    grouped_only(mode)
    mq = mode.queue()

    @mq.handler("ping")
    async def ping(msg: Message[int]) -> int:
        return msg.data

    async with mq.running():
        assert await mq.request("ping", 7, key="p", timeout=10) == 7
    ttls = {}
    for stream in mq.streams:
        client = client_for(stream)
        async for name in client.scan_iter(match=Keys(stream).replies("*")):
            ttls[name] = await client.pttl(name)
    assert len(ttls) == 1, f"one reply stream for one request, found {ttls}"
    assert all(0 < ttl <= 300_000 for ttl in ttls.values()), f"a reply stream lives on: {ttls}"


async def test_the_reply_to_an_encrypted_request_is_encrypted_with_the_requests_key(
    mode: Mode, client_for: Callable[[str], aioredis.Redis]
) -> None:
    """docs/guides/request-reply.md "Replies on the wire": the requester holds the key that
    encrypted its request, so the reply (its value, or a failure's reason) is sealed with
    that key, even after the consumer's current key has moved on."""
    grouped_only(mode)
    old = Keyring({"k1": b"1" * 32}, current="k1")
    rotated = Keyring({"k1": b"1" * 32, "k2": b"2" * 32}, current="k2")
    requester = mode.queue(encryption=old, group=None, ordered=False)  # publishes only
    mq = mode.queue(encryption=rotated, retry=RetryPolicy(attempts=1, max_deliveries=1))

    @mq.handler("card")
    async def card(msg: Message[str]) -> dict[str, str]:
        if msg.data == "declined":
            raise ValueError("card 4111-1111 declined")
        return {"holder": "Ada Lovelace", "card": msg.data}

    async with mq.running(), requester:
        reply = await requester.request("card", "4242", key="c1", timeout=10)
        assert reply == {"holder": "Ada Lovelace", "card": "4242"}
        with pytest.raises(RemoteError, match="card 4111-1111 declined"):
            await requester.request("card", "declined", key="c2", timeout=10)
    stored = []
    for stream in mq.streams:
        client = client_for(stream)
        async for name in client.scan_iter(match=Keys(stream).replies("*")):
            stored += [fields for _, fields in await client.xrange(name)]
    assert len(stored) == 2, stored
    for fields in stored:
        assert fields[b"enc"] == b"aesgcm" and fields[b"kid"] == b"k1", fields
        assert b"Ada" not in b"".join(fields.values()), f"a reply in clear: {fields}"
        assert b"4111" not in b"".join(fields.values()), f"a reason in clear: {fields}"
