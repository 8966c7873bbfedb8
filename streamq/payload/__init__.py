"""Payload codecs: compression (:mod:`.compression`), encryption with a keyring
(:mod:`.keyring`), schema versions and upcasting (:mod:`.versions`), the wire fields that
say how ``data`` is encoded (:mod:`.wire`), what publishers write (:mod:`.encoding`),
what consumers read (:mod:`.reading`), the encryption of replies (:mod:`.replies`), and
what the CLI and the dashboard show (:mod:`.display`). docs/guides/payloads.md explains
them to users, docs/reference/wire-format.md to other clients."""
