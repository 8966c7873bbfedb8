"""The encoded fields of an entry: ``enc``, ``kid``, ``ver`` and what they say of ``data``
and ``meta`` (docs/reference/wire-format.md).

``enc`` lists the steps applied to the JSON of ``data``, in the order applied, joined by
``+`` (``zstd``, ``gzip``, ``aesgcm``: ``zstd+aesgcm`` is compressed, then encrypted). An
encoded ``data`` is the base64 text of the resulting bytes, so every field stays text:
written and read by pybase64 when installed (the extras ``zstd`` and ``crypto`` install
it), else by the standard library, which writes the same text and refuses the same.
Encryption authenticates, with the key ``kid``, the entry's type and the field's name
(:func:`aad`): a value moved to another entry type or another field does not decrypt. An
encrypted ``meta`` value is ``aesgcm:`` followed by the base64 text of its sealed bytes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from functools import partial
from typing import Final, Protocol

ENC: Final = b"enc"
KID: Final = b"kid"
VER: Final = b"ver"
AESGCM: Final = "aesgcm"
COMPRESSIONS: Final = ("zstd", "gzip")  # what :mod:`.compression` compresses with
STEPS: Final = (*COMPRESSIONS, AESGCM)
META_PREFIX: Final = "aesgcm:"


class StepFailed(Exception):
    """One decoding step failed: ``step`` names it, the message says why."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step


class Decrypts(Protocol):
    """What decrypts the values of encrypted entries: a :class:`~.keyring.Keyring`."""

    def decrypt(self, kid: str, sealed: bytes, aad: bytes) -> bytes: ...


def aad(type_name: bytes, field: str) -> bytes:
    """What encryption authenticates besides the value: the entry's type and the field
    (``data``, or ``meta:<name>``)."""
    return b"streamq\x00" + type_name + b"\x00" + field.encode()


Encode = Callable[[bytes], bytes]
Decode = Callable[[bytes | str], bytes]


def base64_functions(fast: bool = True) -> tuple[Encode, Decode]:
    """The base64 encoder, and the decoder that refuses anything but base64 text (with its
    padding): pybase64's when ``fast`` and it is installed, else the standard library's.

    Of a 10 KB payload the standard library's take about 10 µs to encode and 40 µs to
    decode, pybase64's (SIMD) about 1 µs each: for an encrypted entry, most of what
    encryption costs besides the bytes the server holds.
    """
    if fast:
        try:
            import pybase64
        except ImportError:
            pass
        else:
            return pybase64.b64encode, partial(pybase64.b64decode, validate=True)
    return base64.b64encode, partial(base64.b64decode, validate=True)


_encode, _decode = base64_functions()


def to_text(sealed: bytes) -> bytes:
    return _encode(sealed)


def from_text(text: bytes | str, step: str = "base64") -> bytes:
    try:
        return _decode(text)
    except (binascii.Error, ValueError) as e:
        raise StepFailed(step, f"not base64 text ({e})") from None


def steps_of(enc: bytes) -> list[str]:
    """The steps an ``enc`` value names; StepFailed for one it does not know."""
    names = enc.decode("utf-8", "replace").split("+")
    unknown = [name for name in names if name not in STEPS]
    if unknown:
        raise StepFailed(
            "enc",
            f"unknown encoding {unknown[0][:40]!r} in enc {enc[:80].decode('utf-8', 'replace')!r} "
            f"(known: {', '.join(STEPS)})",
        )
    return names


def kid_of(fields: dict[bytes, bytes]) -> str:
    raw = fields.get(KID)
    if raw is None:
        raise StepFailed(AESGCM, "the entry is encrypted but has no kid field")
    return raw.decode("utf-8", "replace")


def decoded_data(fields: dict[bytes, bytes], data: bytes, keyring: Decrypts | None) -> bytes:
    """The JSON of ``data`` as written, the steps of ``enc`` undone in reverse order.
    StepFailed names the step that failed: an unknown ``enc``, base64, a decompression,
    a missing keyring or key, a tag that does not match."""
    steps = steps_of(fields[ENC])
    value = from_text(data)
    for step in reversed(steps):
        if step == AESGCM:
            value = decrypted(fields, value, keyring, "data")
        else:
            # loaded on first use: only a compressed entry is decompressed
            from .compression import decompress

            value = decompress(step, value)
    return value


def decrypted(
    fields: dict[bytes, bytes], sealed: bytes, keyring: Decrypts | None, field: str
) -> bytes:
    kid = kid_of(fields)
    if keyring is None:
        raise StepFailed(AESGCM, f"encrypted with key {kid!r}, and no keyring was given here")
    return keyring.decrypt(kid, sealed, aad(fields.get(b"type", b""), field))


def decrypted_meta(
    fields: dict[bytes, bytes], meta: dict[str, str], keyring: Decrypts | None
) -> dict[str, str]:
    """``meta`` with its encrypted values (``aesgcm:...``) decrypted. Only an entry with a
    ``kid`` has any: elsewhere a value of that form is an ordinary string."""
    if KID not in fields:
        return meta
    for name, value in meta.items():
        if value.startswith(META_PREFIX):
            sealed = from_text(value[len(META_PREFIX) :], f"meta {name!r}")
            plain = decrypted(fields, sealed, keyring, f"meta:{name}")
            try:
                meta[name] = plain.decode()
            except UnicodeDecodeError:
                raise StepFailed(AESGCM, f"meta {name!r} is not UTF-8 once decrypted") from None
    return meta
