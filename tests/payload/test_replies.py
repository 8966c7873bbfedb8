"""A reply's encryption (streamq/payload/replies.py): sealed with the request's key, bound
to its request and field; whatever cannot be opened says which step failed."""

from __future__ import annotations

import pytest

from streamq import Keyring, MessageFormatError
from streamq.payload.replies import opened_reply, reply_key, sealed_reply
from streamq.payload.wire import StepFailed
from streamq.publish.requests import Requests
from tests.payload.helpers import KEY1, KEY2

RING = Keyring({"k1": KEY1, "k2": KEY2}, current="k2")


def as_reply(flat: list[str | bytes]) -> dict[bytes, bytes]:
    encoded = [v.encode() if isinstance(v, str) else v for v in flat]
    return dict(zip(encoded[::2], encoded[1::2], strict=True))


def test_a_reply_opens_with_the_key_of_its_request_and_only_for_it() -> None:
    sealed = as_reply(sealed_reply(["request", "r1", "data", '{"total": 3}'], "k1", RING))
    assert sealed[b"enc"] == b"aesgcm" and sealed[b"kid"] == b"k1"
    assert b"total" not in sealed[b"data"]
    assert opened_reply(sealed, Keyring({"k1": KEY1}, current="k1"))[b"data"] == b'{"total": 3}'
    moved = {**sealed, b"request": b"r2"}  # a sealed value moved to another request
    with pytest.raises(StepFailed) as caught:
        opened_reply(moved, RING)
    assert caught.value.step == "aesgcm"
    swapped = {b"request": b"r1", b"error": sealed[b"data"], b"enc": b"aesgcm", b"kid": b"k1"}
    with pytest.raises(StepFailed):  # from data to error
        opened_reply(swapped, RING)


def test_a_plain_reply_is_returned_as_it_is() -> None:
    plain = {b"request": b"r1", b"data": b"7"}
    assert opened_reply(plain, None) is plain
    assert reply_key({b"type": b"x", b"data": b"1"}, RING) is None  # a plain request
    assert reply_key({b"kid": b"k1"}, None) is None  # a consumer without a keyring
    assert reply_key({b"kid": b"k9"}, RING) is None  # a key it does not hold
    assert reply_key({b"kid": b"k1"}, RING) == "k1"


@pytest.mark.parametrize(
    ("change", "step"),
    [
        ({b"enc": b"zstd"}, "enc"),
        ({b"data": b"not base64!"}, "reply data"),
        ({b"kid": b"k9"}, "aesgcm"),
    ],
)
def test_a_damaged_reply_names_the_step(change: dict[bytes, bytes], step: str) -> None:
    sealed = as_reply(sealed_reply(["request", "r1", "data", "1"], "k1", RING))
    with pytest.raises(StepFailed) as caught:
        opened_reply({**sealed, **change}, RING)
    assert caught.value.step == step


def test_the_requester_raises_message_format_error_for_a_reply_it_cannot_open() -> None:
    sealed = as_reply(sealed_reply(["request", "r1", "data", "1"], "k1", RING))
    requests = Requests(None, None, tuple, keyring=None)  # type: ignore[arg-type]
    with pytest.raises(MessageFormatError, match=r"'card' request cannot be read: aesgcm: .*k1"):
        requests._opened("card", sealed)
