"""Wire format v1, IDs and configuration validation (no server needed), and where a bad
``meta`` ends on the real server: refused at publish, dead-lettered when read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import (
    BatchConfig,
    ConfigError,
    InvalidMessageIdError,
    Message,
    MessageFormatError,
    MessageQueue,
    Publisher,
    RetryPolicy,
    StartFrom,
    StreamId,
)
from streamq.config import ConsumerConfig
from streamq.message import RawEntry, encode_entry
from streamq.wire import resp
from streamq.wire.asking import ASKING, asking_each, split_commands
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for


class Email(BaseModel):
    to: str


def test_encode_model_and_meta() -> None:
    fields = encode_entry("email", Email(to="a@b.c"), {"priority": "high"})
    assert fields == {b"type": "email", b"data": b'{"to":"a@b.c"}', b"meta": b'{"priority":"high"}'}


def test_encode_dict_without_meta_has_no_meta_field() -> None:
    assert encode_entry("x", {"a": 1}) == {b"type": "x", b"data": b'{"a":1}'}


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "é", "a/b", "new\nline"])
def test_invalid_type_names_refused(bad: str) -> None:
    with pytest.raises(MessageFormatError, match="invalid message type"):
        encode_entry(bad, {})


def test_valid_type_name_characters() -> None:
    for name in ("A-z_0.9:x", "x" * 128):
        assert encode_entry(name, {})[b"type"] == name, f"{name!r} not written as given"


def test_meta_must_be_strings() -> None:
    with pytest.raises(MessageFormatError, match="meta"):
        encode_entry("x", {}, {"n": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({"a": None, "b": True, "c": "ok"}, "'a' is None, 'b' is a bool"),
        ({1: "x"}, "key 1 is an int"),
        (["a", "b"], "a mapping of strings to strings, got a list"),
        ("priority=high", "a mapping of strings to strings, got a str"),
    ],
)
def test_meta_refused_at_encoding_says_what_is_wrong(meta: Any, says: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        encode_entry("x", {}, meta)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        (
            b'{"a":null,"b":true,"c":1}',
            "'meta' values must be strings: a is null, b is a boolean, c is a number",
        ),
        (
            b'{"ok":"x","d":{"e":"f"},"g":[],"h":1.5}',
            "d is an object, g is an array, h is a number",
        ),
        (b'{"new\\nline":false}', "'new\\nline' is a boolean"),
    ],
)
def test_non_string_meta_values_from_foreign_producers_are_refused(meta: bytes, says: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        RawEntry("1-0", {b"type": b"x", b"data": b"{}", b"meta": meta}).decode_meta()
    assert says in str(caught.value)


def test_many_non_string_meta_values_are_counted_not_all_listed() -> None:
    meta = b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(50)) + b"}"
    with pytest.raises(MessageFormatError) as caught:
        RawEntry("1-0", {b"meta": meta}).decode_meta()
    assert "k0 is a number" in str(caught.value) and "and 40 more" in str(caught.value)
    assert len(str(caught.value)) < 300


def test_string_meta_values_decode() -> None:
    raw = RawEntry("1-0", {b"meta": '{"a":"1","é":""}'.encode()})
    assert raw.decode_meta() == {"a": "1", "é": ""}


def test_unserialisable_data_refused() -> None:
    with pytest.raises(MessageFormatError, match="not JSON"):
        encode_entry("x", object())


def test_raw_entry_reports_what_is_wrong() -> None:
    with pytest.raises(MessageFormatError, match="no 'type'"):
        RawEntry("1-0", {b"data": b"{}"}).check_type()
    with pytest.raises(MessageFormatError, match="not JSON"):
        RawEntry("1-0", {b"type": b"x", b"meta": b"{nope"}).decode_meta()
    with pytest.raises(MessageFormatError, match="no 'data'"):
        RawEntry("1-0", {b"type": b"x"}).raw_data()


def test_stream_ids_compare_as_integers() -> None:
    assert StreamId.parse("10-0") > StreamId.parse("9-5")  # "10-0" < "9-5" as strings
    assert StreamId.parse("5-10") > StreamId.parse("5-9")
    assert str(StreamId.parse("7")) == "7-0"
    assert StreamId.parse("1-18446744073709551615").next() == StreamId(2, 0)


@pytest.mark.parametrize(
    "bad",
    [
        "", "abc", "1-x", "-1-0", "1-2-3", "1-99999999999999999999", "18446744073709551616-0",
        b"\x80", b"1-\xff", "\uff11-0", "1-\uff11", "\u0663-0", "\u00b2-0", " 1-0", "1-0 ", "1-0\n", "1- 0",
        "1-", "-", "+1-0", "1-+0", "1--0", "1_0-0", "0x1-0", "1.5", "1-0-", "\uff11", "1" * 5000, "1-" + "0" * 4000 + "1" * 30,
    ],  # full-width, Arabic-Indic and superscript digits: int() takes the first two
)  # fmt: skip
def test_bad_ids_refused(bad: str | bytes) -> None:
    with pytest.raises(InvalidMessageIdError, match="invalid stream entry ID"):
        StreamId.parse(bad)


@pytest.mark.parametrize("bad", [None, 5, 1.5, True, ["1-0"], bytearray(b"1-0")])
def test_ids_of_other_types_refused(bad: Any) -> None:
    with pytest.raises(InvalidMessageIdError, match="a string"):
        StreamId.parse(bad)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0", StreamId(0, 0)), ("0-0", StreamId(0, 0)), (b"12-3", StreamId(12, 3)),
        ("007-01", StreamId(7, 1)), ("0" * 5000 + "5", StreamId(5, 0)), ("18446744073709551615-18446744073709551615",
         StreamId(2**64 - 1, 2**64 - 1)),
    ],
)  # fmt: skip
def test_good_ids_parse(text: str | bytes, parsed: StreamId) -> None:
    assert StreamId.parse(text) == parsed


def test_start_positions() -> None:
    assert StartFrom.LATEST.position == "$"
    assert StartFrom.EARLIEST.position == "0"
    assert StartFrom.at("1700000000000-3").position == "1700000000000-3"
    with pytest.raises(ConfigError):
        StartFrom.at("yesterday")


def test_config_errors_name_the_argument() -> None:
    with pytest.raises(ConfigError, match="max_deliveries"):
        RetryPolicy(max_deliveries=0)
    with pytest.raises(ConfigError, match=r"BatchConfig\.size"):
        BatchConfig(size=-1)
    with pytest.raises(ConfigError, match="max_wait"):
        BatchConfig(timeout=2, max_wait=1)
    with pytest.raises(ConfigError, match="max_in_flight"):
        ConsumerConfig(concurrency=10, max_in_flight=5)
    with pytest.raises(ConfigError, match="claim_idle"):
        ConsumerConfig(claim_idle=-1)


def test_durations_accept_timedelta() -> None:
    # the fields are annotated with what they hold once normalised (float), so passing a
    # timedelta is accepted at run time but not by the type checker
    assert ConsumerConfig(claim_idle=timedelta(seconds=2)).claim_idle == 2.0  # type: ignore[arg-type]
    assert RetryPolicy(backoff=timedelta(milliseconds=10)).backoff == 0.01  # type: ignore[arg-type]


def test_queue_constructor_validates(redis_url: str) -> None:
    from streamq import MessageQueue

    with pytest.raises(ConfigError, match="stream"):
        MessageQueue(redis_url, stream="")
    with pytest.raises(ConfigError, match="group"):
        MessageQueue(redis_url, stream="s", group="")
    with pytest.raises(ConfigError, match="concurrency"):
        MessageQueue(redis_url, stream="s", concurrency=-2)
    # misspelt settings: type errors (**unknown: Never), and ConfigError at run time
    with pytest.raises(ConfigError, match="unknown MessageQueue argument"):
        MessageQueue(redis_url, no_such_option=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"retry=RetryPolicy\(max_deliveries=\.\.\.\)"):
        MessageQueue(redis_url, stream="s", max_deliveries=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"batch=BatchConfig\(size=\.\.\.\)"):
        MessageQueue(redis_url, stream="s", size=10)  # type: ignore[arg-type]


# -- meta on the real server: refused at publish, dead-lettered from foreign producers ---

BAD_META: Any = {"a": None, "b": True}


@pytest.mark.anyio
async def test_non_string_meta_is_refused_by_every_publish_path(
    make_queue: QueueFactory, client: aioredis.Redis, redis_url: str
) -> None:
    mq = make_queue()
    async with mq:
        with pytest.raises(MessageFormatError, match="'a' is None, 'b' is a bool"):
            await mq.publish("x", {}, meta=BAD_META)
        with pytest.raises(MessageFormatError, match="'a' is None"):
            await mq.publish_many("x", [{}, {}], meta=BAD_META)
    with Publisher(redis_url, stream=mq.stream) as publisher:
        with pytest.raises(MessageFormatError, match="'a' is None"):
            publisher.publish("x", {}, meta=BAD_META)
        with pytest.raises(MessageFormatError, match="'a' is None"):
            publisher.publish_many("x", [{}, {}], meta=BAD_META)
    assert await client.xlen(mq.stream) == 0  # nothing was sent


@pytest.mark.anyio
async def test_non_string_meta_from_a_foreign_producer_is_dead_lettered_with_the_reason(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    got: list[dict[str, str]] = []

    @mq.handler("t")
    async def handle(msg: Message[Any]) -> None:
        got.append(msg.meta)

    meta = '{"a":null,"b":true,"c":1}'
    async with mq:
        bad = await client.xadd(mq.stream, {"type": "t", "data": "1", "meta": meta})
        await client.xadd(mq.stream, {"type": "t", "data": "2", "meta": '{"ok":"yes"}'})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: len(got) >= 1, what="the good entry")
            await wait_for(lambda: _dead_letters(mq, 1), what="one dead letter")
            await mq.stop()
        (letter,) = await mq.dead_letters()
        assert await pending_count(client, mq.stream, "g") == 0
    assert got == [{"ok": "yes"}]
    assert letter.original_id == bad.decode() and letter.meta == meta
    assert "'meta' values must be strings: a is null, b is a boolean, c is a number" in letter.error
    assert letter.error_type == "streamq.errors.MessageFormatError"


async def _dead_letters(mq: MessageQueue, n: int) -> bool:
    return (await mq.topic_info()).dead_letters >= n


def test_hand_packed_writes_split_into_their_commands() -> None:
    """What is sent again after ASK: each command of a write, byte for byte."""
    xadds, count = resp.pack_xadds("s", [{"type": "t", "data": "x\r\n$3"}, {b"a": b""}])
    xack = resp.pack_xack("s", "g", ["1-0", "2-0"])
    read = resp.pack_xreadgroup("g", "c", "s", ">", 10, 5)
    commands = split_commands(xadds + xack + read)
    assert count == 2 and len(commands) == 4
    assert b"".join(commands[:2]) == xadds and commands[2:] == [xack, read]
    assert asking_each(commands[2:]) == ASKING + xack + ASKING + read
