"""The checked readers of streamq's own records, without a server: what parses, what is
damaged (with its key, field and what was expected), and the bounds of what streamq writes."""

from __future__ import annotations

import json

import pytest

from streamq.wire import records
from streamq.wire.records import MAX_DUE_MS, MAX_LEASE_MS, DamagedRecord, MemberRecord

NOW = 1_800_000_000_000
KEY = "streamq:{s}:x"


@pytest.mark.parametrize("value", [b"20000", b"0", b"abc", b"-1", b"4 ", "\u00b2", b"1.5"])
def test_a_partition_count_out_of_bounds_or_not_a_number_is_damaged(value: bytes | str) -> None:
    found = records.partition_count(KEY, value)
    assert isinstance(found, DamagedRecord)
    assert (found.kind, found.key, found.field) == ("partitions", KEY, "count")
    assert "1..1024" in str(found) and KEY in str(found)


def test_a_partition_count_in_bounds_or_absent_parses() -> None:
    assert records.partition_count(KEY, b"1024") == 1024
    assert records.partition_count(KEY, None) is None


def test_a_member_value_parses_into_its_expiry_and_partitions() -> None:
    assert records.member(KEY, b"c1", b"1700|0,3") == MemberRecord(1700, frozenset({0, 3}))
    assert records.member(KEY, b"c1", b"1700|") == MemberRecord(1700, frozenset())


@pytest.mark.parametrize(
    "value", [b"abc|0", b"1700|\xc2\xb2", b"1700", b"|0", b"1700|0,x", b"1|2000"]
)
def test_a_member_value_that_is_not_expiry_and_partitions_is_damaged(value: bytes) -> None:
    found = records.member(KEY, b"ghost", value)
    assert isinstance(found, DamagedRecord)
    assert found.field == "ghost"


def test_expiries_further_ahead_than_the_longest_lease_are_damaged() -> None:
    member = MemberRecord(NOW + MAX_LEASE_MS + 1, frozenset())
    assert isinstance(records.member_expiry_bounded(KEY, "m", member, NOW), DamagedRecord)
    assert records.lease_expiry(KEY, str(NOW + MAX_LEASE_MS).encode(), NOW) == NOW + MAX_LEASE_MS
    assert isinstance(records.lease_expiry(KEY, str(NOW * 100).encode(), NOW), DamagedRecord)
    assert isinstance(records.lease_expiry(KEY, b"abc", NOW), DamagedRecord)
    assert records.lease_expiry(KEY, None, NOW) == 0


def test_a_lease_token_is_a_counter_below_2_to_the_53() -> None:
    assert records.lease_token(KEY, b"7") == 7
    assert records.lease_token(KEY, None) is None
    for value in (b"abc", str(2**53).encode(), b"-3"):
        assert isinstance(records.lease_token(KEY, value), DamagedRecord)


def test_a_stopped_field_is_an_entry_id() -> None:
    assert records.stopped_id(KEY, b"1700-0") == "1700-0"
    for field in (b"not-an-id", b"1700", b"1-2-3", str(2**64).encode() + b"-0"):
        assert isinstance(records.stopped_id(KEY, field), DamagedRecord)


def test_a_halted_record_parses_or_is_damaged() -> None:
    found = records.halted(KEY, b'["g", "k1"]', b'{"id": "1-0", "reason": "r", "action": "skip"}')
    assert found == records.HaltedRecord("g", "k1", "1-0", "r", "skip")
    for field, value in (
        (b'["g", "k1"]', b"{not json"), (b"[not json", b'{"id": "1-0"}'),
        (b'["g"]', b'{"id": "1-0"}'), (b'["g", 3]', b'{"id": "1-0"}'),
        (b'["g", null]', b'{"id": "x"}'), (b'["g", null]', b'{"id": "1-0", "action": "go"}'),
        (b'["g", null]', b"[]"),
    ):  # fmt: skip
        assert isinstance(records.halted(KEY, field, value), DamagedRecord), (field, value)


@pytest.mark.parametrize("score", [float("inf"), float("-inf"), 1e300, -1.0, MAX_DUE_MS + 1.0])
def test_a_due_time_beyond_what_streamq_writes_is_damaged(score: float) -> None:
    assert isinstance(records.due_time(KEY, b"id", score), DamagedRecord)


def test_a_due_time_parses_into_unix_ms() -> None:
    assert records.due_time(KEY, b"id", 1700.0) == 1700
    assert records.due_time(KEY, b"id", float(MAX_DUE_MS)) == MAX_DUE_MS


def test_a_periodic_tick_far_ahead_or_not_a_number_is_damaged() -> None:
    assert records.periodic_tick(KEY, "tick", str(NOW).encode(), NOW) == NOW
    assert records.periodic_tick(KEY, "tick", None, NOW) is None
    for value in (str(10**20).encode(), b"abc", str(NOW + 10**8).encode()):
        assert isinstance(records.periodic_tick(KEY, "tick", value, NOW), DamagedRecord)


def test_a_damaged_value_is_shown_cut_and_escaped() -> None:
    found = records.partition_count(KEY, b"\x1b[1m" + b"9" * 200)
    assert isinstance(found, DamagedRecord)
    assert "\x1b" not in str(found) and len(found.found) < 100


def test_the_partition_names_give_the_count_only_when_whole() -> None:
    from streamq.wire.partition_names import partition_streams

    names = json.dumps(list(partition_streams("orders", 4)))
    assert records.partition_names(KEY, "orders", names.encode()) == 4
    for value in (b'["x"]', b"[]", b"{not json", names.replace("orders", "other").encode(), None):
        assert isinstance(records.partition_names(KEY, "orders", value), DamagedRecord)


def test_a_pause_field_parses_into_what_is_paused_and_since_when() -> None:
    assert records.paused(KEY, b"*", b"1700", NOW) == records.PausedRecord("*", 1700)
    found = records.paused(KEY, b"email.v2:x", str(NOW).encode(), NOW)
    assert isinstance(found, records.PausedRecord) and found.target == "email.v2:x"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (b"bad type", b"1700", "'*' or a message type"),
        (b"", b"1700", "'*' or a message type"),
        (b"x" * 129, b"1700", "'*' or a message type"),
        (b"\xff", b"1700", "'*' or a message type"),
        (b"email", b"yes", "the pause's time in Unix ms"),
        (b"email", b"-1", "the pause's time in Unix ms"),
        (b"*", str(NOW + records.MAX_PAUSE_AHEAD_MS + 1).encode(), "at most 3600000 ms ahead"),
    ],
)
def test_a_pause_field_that_names_no_type_or_no_time_is_damaged(
    field: bytes, value: bytes, expected: str
) -> None:
    found = records.paused(KEY, field, value, NOW)
    assert isinstance(found, DamagedRecord)
    assert found.kind == "paused" and found.key == KEY and expected in found.expected


def test_a_pause_record_of_another_type_is_damaged() -> None:
    assert records.paused_kind(KEY, b"hash") is None and records.paused_kind(KEY, "none") is None
    found = records.paused_kind(KEY, b"string")
    assert isinstance(found, DamagedRecord) and found.found == "a string"


def test_a_throttle_expiry_without_expiry_or_too_far_ahead_is_damaged() -> None:
    assert records.throttle_expiry(KEY, -2) == 0  # no record: not throttled
    assert records.throttle_expiry(KEY, 1500) == 1500
    assert records.throttle_expiry(KEY, records.MAX_THROTTLE_MS) == records.MAX_THROTTLE_MS
    for pttl in (-1, records.MAX_THROTTLE_MS + 1):
        found = records.throttle_expiry(KEY, pttl)
        assert isinstance(found, DamagedRecord) and found.kind == "throttle"
    # the same damage reads as the same record whatever the expiry: logged once
    assert records.throttle_expiry(KEY, 10**10) == records.throttle_expiry(KEY, 10**11)


def test_a_damaged_rate_state_names_its_key_and_what_was_found() -> None:
    found = records.damaged_rate(KEY, b"garbage")
    assert (found.kind, found.key, found.found) == ("rate", KEY, "'garbage'")
