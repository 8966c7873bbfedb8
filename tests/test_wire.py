"""Wire format v1, IDs and configuration validation (no server needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from streamq import (
    BatchConfig,
    ConfigError,
    InvalidMessageIdError,
    MessageFormatError,
    RetryPolicy,
    StartFrom,
    StreamId,
)
from streamq.config import ConsumerConfig
from streamq.message import RawEntry, encode_entry


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
    encode_entry("A-z_0.9:x", {})
    encode_entry("x" * 128, {})


def test_meta_must_be_strings() -> None:
    with pytest.raises(MessageFormatError, match="meta"):
        encode_entry("x", {}, {"n": 1})  # type: ignore[dict-item]


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


@pytest.mark.parametrize("bad", ["", "abc", "1-x", "-1-0", "1-2-3", "1-99999999999999999999"])
def test_bad_ids_refused(bad: str) -> None:
    with pytest.raises(InvalidMessageIdError):
        StreamId.parse(bad)


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
    assert ConsumerConfig(claim_idle=timedelta(seconds=2)).claim_idle == 2.0
    assert RetryPolicy(backoff=timedelta(milliseconds=10)).backoff == 0.01


def test_queue_constructor_validates(redis_url: str) -> None:
    from streamq import MessageQueue

    with pytest.raises(ConfigError, match="stream"):
        MessageQueue(redis_url, stream="")
    with pytest.raises(ConfigError, match="group"):
        MessageQueue(redis_url, group="")
    with pytest.raises(ConfigError, match="concurrency"):
        MessageQueue(redis_url, concurrency=-2)
    with pytest.raises(ConfigError, match="unknown MessageQueue argument"):
        MessageQueue(redis_url, no_such_option=1)
