"""A reply's encryption (``mq.request``; the reply's wire shape is
:mod:`streamq.wire.replying`).

A reply to an encrypted request is encrypted too, with the key that encrypted the request:
the requester holds that key (it encrypted the request with it), whatever the consumer's
current key is. Its ``data`` (or ``error``, the dead letter's reason) becomes the base64
text of the sealed bytes, and the reply carries ``enc`` (``aesgcm``) and ``kid``, as an
entry does. Encryption authenticates the request's ID and the field's name with it: a
sealed reply moved to another request, or from ``data`` to ``error``, does not decrypt.
A reply to a plain request stays plain JSON (or text), readable by ``redis-cli``.
"""

from __future__ import annotations

from .keyring import Keyring
from .wire import AESGCM, ENC, KID, StepFailed, from_text, to_text

SEALED_FIELDS = (b"data", b"error")


def _aad(request_id: bytes, field: bytes) -> bytes:
    return b"streamq-reply\x00" + request_id + b"\x00" + field


def reply_key(request: dict[bytes, bytes], keyring: Keyring | None) -> str | None:
    """The key ID a reply to ``request`` (the request entry's fields) is encrypted with:
    the request's own, when it was encrypted and this keyring holds it; else None (plain)."""
    kid = request.get(KID)
    if kid is None or keyring is None:
        return None
    name = kid.decode("utf-8", "replace")
    return name if name in keyring.kids else None


def sealed_reply(fields: list[str], kid: str, keyring: Keyring) -> list[str | bytes]:
    """``fields`` (``request``, id, then ``data`` or ``error`` and its value) with the value
    encrypted with key ``kid``, and the ``enc`` and ``kid`` fields added."""
    request_id = fields[1].encode()
    sealed: list[str | bytes] = list(fields[:2])
    for name, value in zip(fields[2::2], fields[3::2], strict=True):
        field = name.encode()
        secret = keyring.encrypt_with(kid, value.encode(), _aad(request_id, field))
        sealed += [name, to_text(secret)]
    return [*sealed, ENC, AESGCM, KID, kid]


def opened_reply(reply: dict[bytes, bytes], keyring: Keyring | None) -> dict[bytes, bytes]:
    """``reply`` with its sealed value decrypted (as it is when not encrypted).
    StepFailed, naming the step, for an unknown ``enc``, a missing keyring or key, a value
    that is not base64 or whose tag does not match."""
    enc = reply.get(ENC)
    if enc is None:
        return reply
    if enc != AESGCM.encode():
        raise StepFailed("enc", f"a reply encoded as {enc[:40]!r}, where only aesgcm is known")
    kid = reply.get(KID, b"").decode("utf-8", "replace")
    if keyring is None:
        raise StepFailed(AESGCM, f"encrypted with key {kid!r}, and this queue has no keyring")
    request_id = reply.get(b"request", b"")
    opened = dict(reply)
    for field in SEALED_FIELDS:
        if field in reply:
            sealed = from_text(reply[field], f"reply {field.decode()}")
            opened[field] = keyring.decrypt(kid, sealed, _aad(request_id, field))
    return opened
