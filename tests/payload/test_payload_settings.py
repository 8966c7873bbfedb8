"""Payload settings are checked when a queue, a publisher or a keyring is built, and key
material never shows in a repr, an error or a dead letter."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from streamq import ConfigError, Keyring, MessageQueue, Publisher

from .helpers import KEY1, KEY2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compression": "lz4"}, "compression must be None, 'zstd' or 'gzip', got 'lz4'"),
        (
            {"compression": "gzip", "compress_over": -1},
            "compress_over must be a number of bytes >= 0",
        ),
        ({"encryption": "secret"}, "encryption must be a streamq.Keyring or None, got str"),
        ({"encrypt_meta": ["ssn"]}, r"encrypt_meta needs encryption=Keyring\(...\)"),
        (
            {"encrypt_meta": "ssn", "encryption": Keyring({"k": KEY1}, "k")},
            "encrypt_meta must be a list",
        ),
        ({"on_newer_version": "skip"}, "on_newer_version must be 'wait' or 'dead_letter'"),
    ],
)
def test_a_queue_refuses_payload_settings_that_cannot_be(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        MessageQueue(stream="s", **options)


def test_the_blocking_publisher_checks_the_same_settings(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="compression must be"):
        Publisher(redis_url, "s", compression="brotli")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"versions\['order'\]: version must be an int >= 1"):
        Publisher(redis_url, "s", versions={"order": 0})


@pytest.mark.parametrize(
    ("keys", "current", "message"),
    [
        ({}, "k1", "at least one key"),
        ({"k1": b"short"}, "k1", "key 'k1' is 5 bytes long: AES-GCM takes 16, 24 or 32 bytes"),
        ({"k1": "not base64!"}, "k1", "key 'k1' is a str that is not base64"),
        ({"k1": 12345}, "k1", "key 'k1' must be bytes"),
        ({"bad id": KEY1}, "bad id", "invalid key ID 'bad id'"),
        ({"k1": KEY1}, "k2", r"current='k2' is not a key ID of the keyring \(k1\)"),
    ],
)
def test_a_keyring_refuses_keys_that_cannot_be_without_showing_them(
    keys: dict[str, Any], current: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        Keyring(keys, current=current)
    for key in keys.values():
        if isinstance(key, bytes):
            assert key.decode() not in str(raised.value)


def test_no_key_material_in_repr_str_or_attributes() -> None:
    ring = Keyring({"k2": KEY2, "k1": base64.b64encode(KEY1).decode()}, current="k2")
    assert repr(ring) == str(ring) == "Keyring(kids=['k2', 'k1'], current='k2')"
    assert ring.kids == ("k2", "k1")
    shown = repr(MessageQueue(stream="s", encryption=ring).__dict__)
    for secret in (KEY1, KEY2, base64.b64encode(KEY1)):
        assert secret.decode() not in shown
    assert len(Keyring.generate_key()) == 32
