"""Re-encryption with a keyring's current key: what a dead-letter replay does to an entry
encrypted with an older key, so that the old key can be retired once nothing else needs
it."""

from __future__ import annotations

import logging

from .keyring import Keyring
from .wire import AESGCM, ENC, KID, META_PREFIX, StepFailed, aad, from_text, steps_of, to_text

log = logging.getLogger(__name__)


def reencrypted(fields: dict[bytes, bytes], keyring: Keyring) -> dict[bytes, bytes]:
    """``fields`` (an entry's) with ``data`` and its encrypted ``meta`` values sealed again
    with the current key of ``keyring``. An entry that is not encrypted, or already with
    the current key, is returned as it is; so is one that does not decrypt here (an
    unknown key, a failed tag): its consumer dead-letters it again, saying why."""
    kid = fields.get(KID)
    if kid is None or kid.decode("utf-8", "replace") == keyring.current or ENC not in fields:
        return fields
    try:
        return _resealed(fields, kid.decode("utf-8", "replace"), keyring)
    except StepFailed as e:
        log.warning("replayed with its key %r as it was: it does not decrypt here (%s)",
                    kid.decode("utf-8", "replace"), e)  # fmt: skip
        return fields


def _resealed(fields: dict[bytes, bytes], kid: str, keyring: Keyring) -> dict[bytes, bytes]:
    import pydantic_core

    type_name = fields.get(b"type", b"")
    resealed = dict(fields)
    if steps_of(fields[ENC])[-1:] == [AESGCM]:  # streamq encrypts last
        data_aad = aad(type_name, "data")
        plain = keyring.decrypt(kid, from_text(fields.get(b"data", b"")), data_aad)
        resealed[b"data"] = to_text(keyring.encrypt(plain, data_aad))
    meta_raw = fields.get(b"meta")
    if meta_raw:
        meta = pydantic_core.from_json(meta_raw)
        if isinstance(meta, dict):
            for name, value in meta.items():
                if isinstance(value, str) and value.startswith(META_PREFIX):
                    meta_aad = aad(type_name, f"meta:{name}")
                    plain = keyring.decrypt(kid, from_text(value[len(META_PREFIX) :]), meta_aad)
                    sealed = to_text(keyring.encrypt(plain, meta_aad)).decode()
                    meta[name] = META_PREFIX + sealed
            resealed[b"meta"] = pydantic_core.to_json(meta)
    resealed[KID] = keyring.current.encode()
    return resealed
