"""An entry's payload as the CLI shows it: decompressed, and decrypted only with a keyring
(without one, an encrypted payload is shown as such: its steps and key ID, never its
bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .compression import StepFailed
from .keyring import Keyring
from .wire import AESGCM, ENC, KID, decoded_data


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
