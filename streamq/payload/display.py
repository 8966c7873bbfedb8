"""An entry's payload as the CLI and the dashboard show it: decompressed, and decrypted
only with a keyring (without one, an encrypted payload is shown as such: its steps and key
ID, never its bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic_core

from .keyring import Keyring
from .wire import AESGCM, ENC, KID, META_PREFIX, StepFailed, decoded_data, decrypted_meta


def shown_data(
    fields: Mapping[bytes, bytes], keyring: Keyring | None = None
) -> tuple[bytes | None, dict[str, Any]]:
    """The JSON of ``data`` to show (None when it cannot be had) and what to say of it:
    ``{"encrypted": "zstd+aesgcm with key 'k1'"}`` or ``{"data_error": ...}``."""
    raw = fields.get(b"data")
    if raw is None or ENC not in fields:
        return raw, {}
    enc = fields[ENC].decode("utf-8", "replace")
    try:
        return decoded_data(dict(fields), raw, keyring), {}
    except StepFailed as e:
        if e.step == AESGCM and keyring is None and KID in fields:
            kid = fields[KID].decode("utf-8", "replace")
            return None, {"encrypted": f"{enc} with key {kid!r}"}
        return None, {"data_error": f"cannot decode ({e.step}): {e}"}


def shown_meta(
    fields: Mapping[bytes, bytes], keyring: Keyring | None
) -> tuple[bytes | None, dict[str, Any]]:
    """The JSON of ``meta`` to show: its encrypted values (``aesgcm:...``) decrypted with
    ``keyring``, else shown as such (``<encrypted with key 'k1'>``, as the data is, never
    their ciphertext); ``{"meta_error": ...}`` when one does not decrypt. ``meta`` as
    stored when it is not a JSON object."""
    raw = fields.get(b"meta")
    if raw is None or KID not in fields:
        return raw, {}
    try:
        meta = pydantic_core.from_json(raw)
    except ValueError:
        return raw, {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        return raw, {}
    if keyring is None:
        kid = fields[KID].decode("utf-8", "replace")
        shown = {
            name: f"<encrypted with key {kid!r}>" if value.startswith(META_PREFIX) else value
            for name, value in meta.items()
        }
        return pydantic_core.to_json(shown), {}
    try:
        return pydantic_core.to_json(decrypted_meta(dict(fields), meta, keyring)), {}
    except StepFailed as e:
        return raw, {"meta_error": f"cannot decrypt ({e.step}): {e}"}
