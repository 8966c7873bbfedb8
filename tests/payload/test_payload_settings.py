"""Payload settings are checked when a queue, a publisher or a keyring is built, and key
material never shows in a repr, an error or a dead letter."""

from __future__ import annotations

import base64
import json
import traceback
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


def _keyring_text(current: str = "k2") -> str:
    keys = {"k1": base64.b64encode(KEY1).decode(), "k2": base64.b64encode(KEY2).decode()}
    return json.dumps({"current": current, "keys": keys})


def test_a_keyring_is_read_from_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEYRING", _keyring_text())
    ring = Keyring.from_env("TEST_KEYRING")
    assert ring.kids == ("k1", "k2") and ring.current == "k2"
    sealed = Keyring({"k1": KEY1}, current="k1").encrypt(b"plain", b"aad")
    assert ring.decrypt("k1", sealed, b"aad") == b"plain"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "environment variable TEST_KEYRING is not set: it holds the keyring as JSON"),
        ("", "environment variable TEST_KEYRING is not set"),
        ('{"current": "k1", "keys": {"k1": "' + "A" * 40, "TEST_KEYRING is not JSON"),
        ("null", "TEST_KEYRING does not hold a keyring"),
        ('{"k1": "' + base64.b64encode(KEY1).decode() + '"}', "does not hold a keyring"),
        ('{"current": "k1", "keys": ["k1"]}', "does not hold a keyring"),
        (
            '{"current": "k1", "keys": {"k1": "' + base64.b64encode(b"x" * 20).decode() + '"}}',
            "environment variable TEST_KEYRING: key 'k1' is 20 bytes long",
        ),
        (
            _keyring_text(current="k3"),
            r"environment variable TEST_KEYRING: current='k3' is not a key ID of the keyring "
            r"\(k1, k2\)",
        ),
    ],
)
def test_a_keyring_variable_that_cannot_be_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch, value: str | None, message: str
) -> None:
    if value is None:
        monkeypatch.delenv("TEST_KEYRING", raising=False)
    else:
        monkeypatch.setenv("TEST_KEYRING", value)
    with pytest.raises(ConfigError, match=message) as raised:
        Keyring.from_env("TEST_KEYRING")
    shown = "".join(traceback.format_exception(raised.value))
    assert base64.b64encode(KEY1).decode() not in shown and "A" * 40 not in shown
    assert base64.b64encode(b"x" * 20).decode() not in shown
