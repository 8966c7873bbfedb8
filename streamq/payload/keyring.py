"""Encryption keys: a :class:`Keyring` of AES-GCM keys by key ID, one of them current.

The current key encrypts; every key of the keyring decrypts, so keys rotate without a
pause: add the new key, make it current, and remove the old one once no entry (nor dead
letter, scheduled message or Spark checkpoint) still needs it. AES-GCM comes from the
``cryptography`` package (extra ``[crypto]``).

Key material is held only inside ``cryptography``'s cipher objects: it is not an
attribute of the keyring, and neither ``repr``, ``str``, an error message nor a log
record names more than the key IDs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Final

from ..errors import ConfigError
from .wire import StepFailed

KID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
KEY_SIZES: Final = (16, 24, 32)  # AES-128, AES-192, AES-256
NONCE_BYTES: Final = 12


def _aesgcm() -> Any:
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigError(
            "encryption needs the cryptography package: pip install 'streamq[crypto]'"
        ) from None
    return AESGCM, InvalidTag


def _key_bytes(kid: str, key: object) -> bytes:
    """``key`` as bytes: bytes as given, or a str of base64; ConfigError naming the key ID
    (never the key) when it is neither, or not 16, 24 or 32 bytes long."""
    if isinstance(key, str):
        try:
            key = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                f"key {kid!r} is a str that is not base64: give the key as bytes, or as "
                "the base64 text of its bytes"
            ) from None
    if not isinstance(key, bytes | bytearray):
        raise ConfigError(f"key {kid!r} must be bytes (or base64 text), got {type(key).__name__}")
    if len(key) not in KEY_SIZES:
        raise ConfigError(
            f"key {kid!r} is {len(key)} bytes long: AES-GCM takes 16, 24 or 32 bytes "
            "(Keyring.generate_key() makes a 32-byte one)"
        )
    return bytes(key)


_NOT_JSON: Final = object()
KEYRING_SHAPE: Final = '{"current": "k1", "keys": {"k1": "<base64 of 16, 24 or 32 bytes>"}}'


def _keyring_json(variable: str, text: str | None) -> dict[str, Any]:
    """The JSON object in ``text`` (the variable's value) when it has the keyring's shape;
    ConfigError otherwise. The value is never quoted, nor kept in an exception's context."""
    if not text:
        raise ConfigError(f"environment variable {variable} is not set: it holds the keyring "
                          f"as JSON, {KEYRING_SHAPE}")  # fmt: skip
    parsed: object = _NOT_JSON
    # raised below, not from here: the decoder's error holds the whole text
    with contextlib.suppress(ValueError):
        parsed = json.loads(text)
    keys = parsed.get("keys") if isinstance(parsed, dict) else None
    current = parsed.get("current") if isinstance(parsed, dict) else None
    if (
        not isinstance(parsed, dict)
        or set(parsed) != {"current", "keys"}
        or not isinstance(current, str)
        or not isinstance(keys, dict)
    ):
        what = "is not JSON" if parsed is _NOT_JSON else "does not hold a keyring"
        raise ConfigError(f"environment variable {variable} {what}: it must hold a JSON "
                          f"object {KEYRING_SHAPE}")  # fmt: skip
    return parsed


class Keyring:
    """AES-GCM keys by key ID; ``current`` names the one that encrypts.

    ``keys``: key ID (1-64 characters of ``[A-Za-z0-9_.:-]``) -> key (16, 24 or 32
    bytes, or the base64 text of them). Raises ConfigError for a bad key or key ID, a
    ``current`` that is not in ``keys``, or a missing ``cryptography`` package.
    """

    __slots__ = ("_ciphers", "_invalid_tag", "current")

    def __init__(self, keys: Mapping[str, bytes | str], current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigError("Keyring needs a mapping of at least one key ID -> key")
        aesgcm, self._invalid_tag = _aesgcm()
        ciphers = {}
        for kid, key in keys.items():
            if not isinstance(kid, str) or KID_PATTERN.fullmatch(kid) is None:
                raise ConfigError(f"invalid key ID {kid!r}: use 1-64 characters of [A-Za-z0-9_.:-]")
            ciphers[kid] = aesgcm(_key_bytes(kid, key))
        if current not in ciphers:
            raise ConfigError(
                f"current={current!r} is not a key ID of the keyring ({', '.join(ciphers)})"
            )
        self._ciphers, self.current = ciphers, current

    @classmethod
    def from_env(cls, variable: str) -> Keyring:
        """The keyring held by the environment variable ``variable``, as JSON:
        ``{"current": "k2", "keys": {"k1": "<base64>", "k2": "<base64>"}}``.

        For the command line, the dashboard and Spark, so that keys never appear in a
        command's arguments (``ps``, shell history) nor in a Spark plan. Raises
        ConfigError naming the variable and what is wrong, never quoting its value.
        """
        if not isinstance(variable, str) or not variable:
            raise ConfigError(
                f"the keyring's environment variable must be a name, got {variable!r}"
            )
        parsed = _keyring_json(variable, os.environ.get(variable))
        try:
            return cls(parsed["keys"], current=parsed["current"])
        except ConfigError as e:  # names the variable; the messages never quote a key
            raise ConfigError(f"environment variable {variable}: {e}") from None

    @staticmethod
    def generate_key() -> bytes:
        """A new random 32-byte key (AES-256)."""
        return os.urandom(32)

    @property
    def kids(self) -> tuple[str, ...]:
        """The key IDs, in the order given."""
        return tuple(self._ciphers)

    def encrypt(self, plain: bytes, aad: bytes) -> bytes:
        """``plain`` encrypted with the current key: nonce (12 bytes), ciphertext, tag.
        ``aad``: authenticated with it, not stored (the decrypting side rebuilds it)."""
        return self.encrypt_with(self.current, plain, aad)

    def encrypt_with(self, kid: str, plain: bytes, aad: bytes) -> bytes:
        """As :meth:`encrypt`, with the key ``kid`` of this keyring (a reply is encrypted
        with its request's key, which its requester holds)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + bytes(self._ciphers[kid].encrypt(nonce, plain, aad))

    def decrypt(self, kid: str, sealed: bytes, aad: bytes) -> bytes:
        """What :meth:`encrypt` sealed with key ``kid``; StepFailed for an unknown key ID, a
        value too short to hold a nonce and a tag, or a tag that does not match."""
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise StepFailed(
                "aesgcm", f"key ID {kid!r} is not in this keyring ({', '.join(self._ciphers)})"
            )
        if len(sealed) < NONCE_BYTES + 16:
            raise StepFailed("aesgcm", "too short for AES-GCM (nonce and tag)")
        try:
            return bytes(cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad))
        except self._invalid_tag:
            raise StepFailed(
                "aesgcm",
                f"authentication failed with key {kid!r} (another key of that ID, or altered data)",
            ) from None

    def __repr__(self) -> str:
        return f"Keyring(kids={list(self._ciphers)!r}, current={self.current!r})"

    __str__ = __repr__
