"""What a publisher writes: a message's fields encoded per the queue's payload settings.

:class:`PayloadCodec` holds a queue's (or a blocking ``Publisher``'s) settings, checked
when it is built: ``compression`` (``"zstd"``, ``"gzip"`` or None) of a ``data`` longer
than ``compress_over`` bytes, ``encryption`` (a :class:`~.keyring.Keyring`: ``data`` and
the ``meta`` values named in ``encrypt_meta`` are encrypted with its current key), and the
schema version each type is written with (``ver``). A codec with none of these writes the
fields of :func:`streamq.message.encode_entry` as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, MessageFormatError
from ..message import encode_entry
from .versions import Versions
from .wire import AESGCM, ENC, KID, META_PREFIX, VER, aad, to_text

if TYPE_CHECKING:
    from .keyring import Keyring

Fields = dict[bytes | str, bytes | str]
Compression = Literal["zstd", "gzip"]
VersionOf = Callable[[str], int]


def _version_one(message_type: str) -> int:
    return 1


def written_versions(versions: Mapping[str, int] | None) -> VersionOf:
    """The version each type is written with, from ``{type: version}`` (1 for the others);
    ConfigError for a version that is not a positive int."""
    if not versions:
        return _version_one
    if not isinstance(versions, Mapping):
        raise ConfigError(f"versions must be a dict {{type: version}}, got {versions!r}")
    table = {
        name: Versions.checked(version, None, f"versions[{name!r}]").version
        for name, version in versions.items()
    }
    return lambda message_type: table.get(message_type, 1)


def _checked_meta_names(names: object, keyring: Keyring | None) -> frozenset[str]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ConfigError(f"encrypt_meta must be a list of meta key names, got {names!r}")
    checked = frozenset(names)
    if any(not isinstance(name, str) or not name for name in checked):
        raise ConfigError(
            f"encrypt_meta must hold non-empty strings, got {sorted(map(repr, checked))}"
        )
    if checked and keyring is None:
        raise ConfigError("encrypt_meta needs encryption=Keyring(...): with what key otherwise?")
    return checked


class PayloadCodec:
    """A publisher's payload settings, and the encoding of each message by them.

    Raises ConfigError, naming the fix, for an unknown compression, a negative
    ``compress_over``, ``encryption`` that is not a Keyring, ``encrypt_meta`` without it.
    """

    __slots__ = ("_version_of", "compress_over", "compression", "encrypt_meta", "keyring")

    def __init__(
        self,
        compression: Compression | None = None,
        compress_over: int = 1024,
        encryption: Keyring | None = None,
        encrypt_meta: Iterable[str] = (),
        version_of: VersionOf = _version_one,
    ) -> None:
        if compression is None and type(compress_over) is int and compress_over >= 0:
            self.compression = None  # nothing more to check
        else:  # loaded on first use: only a queue given compression= compresses
            from .compression import check_compression

            self.compression = check_compression(compression, compress_over)
        self.compress_over = compress_over
        if encryption is not None:  # loaded on first use: only a queue that encrypts
            from .keyring import Keyring

            if not isinstance(encryption, Keyring):
                raise ConfigError(
                    f"encryption must be a streamq.Keyring or None, got {type(encryption).__name__}"
                )
        self.keyring = encryption
        self.encrypt_meta = _checked_meta_names(encrypt_meta, encryption)
        self._version_of = version_of

    def with_versions(self, version_of: VersionOf) -> PayloadCodec:
        """The same settings, writing each type's version as ``version_of`` says."""
        return PayloadCodec(
            self.compression, self.compress_over, self.keyring, self.encrypt_meta, version_of
        )

    @property
    def transforms(self) -> bool:
        """Whether it compresses or encrypts anything."""
        return self.compression is not None or self.keyring is not None

    def entry(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        key: str | bytes | None = None,
    ) -> Fields:
        """The XADD fields of one message: those of ``encode_entry``, then encoded."""
        fields = encode_entry(message_type, data, meta, key)
        version = self._version_of(message_type)
        if version != 1:
            fields[VER] = str(version)
        if self.transforms:
            self.encode(fields)
        return fields

    def entries(
        self,
        message_type: str,
        items: Sequence[Any],
        meta: Mapping[str, str] | None,
        keys: Sequence[str | bytes | None],
    ) -> list[Fields]:
        """The XADD fields of many messages of one type (``publish_many``), each as
        :meth:`entry` makes it; their ``data`` compressed together (:func:`compress_many`)."""
        version = self._version_of(message_type)
        rows = []
        for item, key in zip(items, keys, strict=True):
            fields = encode_entry(message_type, item, meta, key)
            if version != 1:
                fields[VER] = str(version)
            rows.append(fields)
        if not self.transforms:
            return rows
        packed = self._compressed_together(rows)
        for i, fields in enumerate(rows):
            self.encode(fields, packed.get(i))
        return rows

    def _compressed_together(self, rows: list[Fields]) -> dict[int, bytes]:
        """Row index -> its ``data`` compressed, for the rows over ``compress_over``."""
        if self.compression is None:
            return {}
        raws = {i: _as_bytes(f[b"data"]) for i, f in enumerate(rows)}
        over = [i for i, raw in raws.items() if len(raw) > self.compress_over]
        # loaded by __init__ for a codec with compression=: only bound here
        from .compression import compress_many

        packed = compress_many(self.compression, [raws[i] for i in over])
        return dict(zip(over, packed, strict=True))

    def encode(self, fields: Fields, packed: bytes | None = None) -> Fields:
        """Compress and encrypt the ``data`` (and listed ``meta`` values) of ``fields`` in
        place, as these settings say; return ``fields``. ``packed``: the ``data``
        compressed already (:meth:`entries`)."""
        type_name = _as_bytes(fields[b"type"])
        raw = _as_bytes(fields[b"data"])
        steps = []
        if packed is None and self.compression is not None and len(raw) > self.compress_over:
            # loaded by __init__ for a codec with compression=: only bound here
            from .compression import compress

            packed = compress(self.compression, raw)
        if packed is not None and self.compression is not None and len(packed) < len(raw):
            raw = packed  # incompressible data goes as it is
            steps.append(self.compression)
        keyring = self.keyring
        if keyring is not None:
            raw = keyring.encrypt(raw, aad(type_name, "data"))
            steps.append(AESGCM)
            fields[KID] = keyring.current
            if self.encrypt_meta and b"meta" in fields:
                fields[b"meta"] = self._sealed_meta(type_name, _as_bytes(fields[b"meta"]))
        if steps:
            fields[b"data"] = to_text(raw)
            fields[ENC] = "+".join(steps)
        return fields

    def _sealed_meta(self, type_name: bytes, meta_json: bytes) -> bytes:
        import pydantic_core

        meta: dict[str, str] = pydantic_core.from_json(meta_json)
        keyring = self.keyring
        assert keyring is not None
        for name, value in meta.items():
            if name in self.encrypt_meta:
                sealed = keyring.encrypt(value.encode(), aad(type_name, f"meta:{name}"))
                meta[name] = META_PREFIX + to_text(sealed).decode()
            elif value.startswith(META_PREFIX):
                raise MessageFormatError(
                    f"meta {name!r} starts with {META_PREFIX!r}, which marks an encrypted "
                    "value on an encrypted entry: list it in encrypt_meta, or change it"
                )
        return pydantic_core.to_json(meta)


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


PLAIN = PayloadCodec()
