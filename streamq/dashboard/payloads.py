"""A dead letter's payload as the dashboard shows it (:func:`shown_payload`).

A compressed ``data`` is shown decompressed. An encrypted one is shown as such (its
encoding and key ID, none of its bytes) unless the dashboard was started with a keyring
(``streamq dashboard --keyring-env VAR``), which decrypts it and the encrypted ``meta``
values. The keyring itself is never shown: an error names the key ID at most. A ``data``
that was read cut (:data:`~.paging.SHOWN_BYTES`) cannot be decoded: the page says so and
links its download (the value as stored).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..payload.display import shown_data, shown_meta
from ..payload.keyring import Keyring
from ..topic.deadletter import DeadLetter
from .paging import SHOWN_BYTES

# A decoded data may be far longer than it was stored: this much of it is kept to show.
DECODED_SHOWN = SHOWN_BYTES - 1000


@dataclass(frozen=True, slots=True)
class ShownPayload:
    """What the page shows of a letter's ``data`` and ``meta``.

    ``data``: the text to show, None when there is none to show. ``stored``: how the
    payload was stored when it was encoded (``"zstd"``, ``"zstd+aesgcm with key 'k1'"``),
    None for plain JSON. ``encrypted``: shown as encrypted, for want of a keyring.
    ``error``: why ``data`` (or an encrypted ``meta`` value) cannot be shown.
    """

    data: str | None
    meta: str | None
    stored: str | None = None
    encrypted: bool = False
    error: str | None = None


def shown_payload(letter: DeadLetter, keyring: Keyring | None) -> ShownPayload:
    """The payload of ``letter`` to show, decoded as far as this dashboard can."""
    if letter.enc is None and letter.kid is None:
        return ShownPayload(letter.data, letter.meta)
    fields = _fields(letter)
    stored = _stored(letter)
    meta, meta_said = shown_meta(fields, keyring)
    meta_text = _text(meta)
    if letter.enc is None:  # an entry with a kid but plain data: encrypted meta values only
        return ShownPayload(letter.data, meta_text, stored, error=meta_said.get("meta_error"))
    if "data" in letter.cut:
        too_long = f"{letter.cut['data']} bytes as stored: too long to decode here"
        return ShownPayload(None, meta_text, stored, error=too_long)
    data, said = shown_data(fields, keyring)
    if "encrypted" in said:
        return ShownPayload(None, meta_text, stored, encrypted=True)
    error = said.get("data_error") or meta_said.get("meta_error")
    return ShownPayload(_text(data, cut=True), meta_text, stored, error=error)


def _fields(letter: DeadLetter) -> dict[bytes, bytes]:
    fields = {b"type": letter.type, b"data": letter.data, b"meta": letter.meta,
              b"enc": letter.enc, b"kid": letter.kid}  # fmt: skip
    return {name: value.encode() for name, value in fields.items() if value is not None}


def _stored(letter: DeadLetter) -> str:
    steps = letter.enc or "plain data, encrypted meta values"
    return steps if letter.kid is None else f"{steps} with key {letter.kid!r}"


def _text(value: bytes | None, cut: bool = False) -> str | None:
    if value is None:
        return None
    if cut and len(value) > DECODED_SHOWN:
        return value[:DECODED_SHOWN].decode("utf-8", "replace") + f"… ({len(value)} bytes, cut)"
    return value.decode("utf-8", "replace")
