"""What a consumer reads: an entry's ``data`` and ``meta`` decoded, upcast and validated.

:func:`read_payload` is what the dispatcher calls for each entry it hands to a handler. A
route's ``parse`` is an :class:`EntryReader` once :func:`bind` gave it the queue's keyring
and its type's :class:`~.versions.Versions`; an entry without ``enc`` and ``ver`` (the
usual case) costs two dictionary lookups more than parsing its JSON. Whatever cannot be
decoded raises :class:`~streamq.errors.PayloadError` naming the entry's version and the
step that failed, which dead-letters the entry with that reason; an entry of a newer
version than the handler knows raises :class:`~streamq.errors.NewerVersionError`, which
waits for a consumer that knows it (:func:`waits_for_newer_consumer`) unless the queue
says ``on_newer_version="dead_letter"``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pydantic_core
from pydantic import BaseModel, TypeAdapter

from ..errors import ConfigError, NewerVersionError, PayloadError
from ..message import RawEntry
from .versions import NO_VERSIONS, Versions, entry_version
from .wire import ENC, KID, VER, StepFailed, decoded_data, decrypted_meta

if TYPE_CHECKING:
    from ..config import RetryPolicy
    from .keyring import Keyring

log = logging.getLogger(__name__)

OnNewerVersion = Literal["wait", "dead_letter"]
Parse = Callable[[bytes], Any]
_META = b"meta"


class Route(Protocol):
    """What the payload layer reads of a consumer's route: its parser and its model."""

    @property
    def parse(self) -> Parse: ...

    @property
    def model(self) -> Any: ...


def check_on_newer_version(value: object) -> OnNewerVersion:
    if value not in ("wait", "dead_letter"):
        raise ConfigError(f"on_newer_version must be 'wait' or 'dead_letter', got {value!r}")
    return value


def _python_validator(model: Any) -> Callable[[Any], Any]:
    if model is Any or model is None:
        return lambda value: value
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model.model_validate
    return TypeAdapter(model).validate_python


class EntryReader:
    """A route's ``parse`` (bytes of JSON -> validated value, as every route's) that also
    reads whole entries: :meth:`read`."""

    __slots__ = (
        "_direct",
        "_newer_logged",
        "_validate",
        "keyring",
        "model",
        "newer",
        "parse",
        "versions",
    )

    def __init__(
        self,
        parse: Parse,
        model: Any,
        versions: Versions = NO_VERSIONS,
        keyring: Keyring | None = None,
        newer: OnNewerVersion = "wait",
    ) -> None:
        self.parse, self.model, self.versions = parse, model, versions
        self.keyring, self.newer = keyring, newer
        self._validate: Callable[[Any], Any] | None = None  # made when first needed
        self._newer_logged: set[int] = set()
        self._direct = versions.version == 1  # an entry without enc and ver needs no step

    def __call__(self, raw: bytes) -> Any:
        return self.parse(raw)

    def read(self, entry: RawEntry) -> tuple[Any, dict[str, str]]:
        """The entry's validated ``data`` and its ``meta``; PayloadError (or what the
        model raises for an entry of this handler's version) when they cannot be had."""
        fields = entry.fields
        if self._direct and ENC not in fields and VER not in fields:  # the usual case
            data = self.parse(entry.raw_data())
        else:
            data = self._decoded(entry)
        if _META not in fields:
            return data, {}
        meta = entry.decode_meta()
        if KID in fields:
            try:
                meta = decrypted_meta(fields, meta, self.keyring)
            except StepFailed as e:
                raise _failed(e, self._version_or_none(fields)) from None
        return data, meta

    @staticmethod
    def _version_or_none(fields: dict[bytes, bytes]) -> int | None:
        try:
            return entry_version(fields.get(VER))
        except StepFailed:
            return None

    def _decoded(self, entry: RawEntry) -> Any:
        fields = entry.fields
        try:
            version = entry_version(fields.get(VER))
        except StepFailed as e:
            raise _failed(e, None) from None
        try:
            raw = entry.raw_data()
            if ENC in fields:
                raw = decoded_data(fields, raw, self.keyring)
            current = self.versions.version
            if version == current:
                return self.parse(raw)
            if version > current:
                raise self._newer(entry, version)
            return self._upcast(version, raw)
        except StepFailed as e:
            raise _failed(e, version) from e.__cause__

    def _upcast(self, version: int, raw: bytes) -> Any:
        try:
            data = pydantic_core.from_json(raw)
        except ValueError as e:
            raise StepFailed("json", f"data is not JSON: {e}") from None
        data = self.versions.upcast_from(version, data)
        if self._validate is None:
            self._validate = _python_validator(self.model)
        try:
            return self._validate(data)
        except Exception as e:
            raise StepFailed(
                "validation",
                f"the model refused it once upcast to version {self.versions.version}: {e}",
            ) from e

    def _newer(self, entry: RawEntry, version: int) -> PayloadError:
        current = self.versions.version
        text = f"entry version {version} is newer than this handler's version {current}"
        if self.newer == "dead_letter":
            return PayloadError(f"{text} (on_newer_version='dead_letter')", version=version,
                                step="ver")  # fmt: skip
        if version not in self._newer_logged:  # once per version: a deploy may take a while
            self._newer_logged.add(version)
            log.warning(
                "%s (type %r, entry %s): left for a consumer that knows it", text,
                entry.type, entry.id,
            )  # fmt: skip
        return NewerVersionError(f"{text}; no consumer that knows it took it", version=version,
                                 step="ver")  # fmt: skip


def _failed(error: StepFailed, version: int | None) -> PayloadError:
    named = "unknown version" if version is None else f"version {version}"
    return PayloadError(f"entry {named}, step {error.step!r} failed: {error}", version=version,
                        step=error.step)  # fmt: skip


def read_payload(route: Route, entry: RawEntry) -> tuple[Any, dict[str, str]]:
    """The ``data`` (validated) and ``meta`` of ``entry`` for ``route``'s handler: the
    dispatcher's one call into the payload layer."""
    parse = route.parse
    if type(parse) is EntryReader:
        return parse.read(entry)
    fields = entry.fields
    if ENC in fields or VER in fields or KID in fields:  # a route bind() did not see
        return EntryReader(parse, route.model).read(entry)
    return parse(entry.raw_data()), entry.decode_meta() if _META in fields else {}


def waits_for_newer_consumer(error: Exception, entry: RawEntry, retry: RetryPolicy) -> bool:
    """Whether the entry that raised ``error`` waits for a consumer that knows its newer
    version (as an entry of an unknown type waits for one that has its handler): until
    ``retry.unknown_type_deliveries`` deliveries, then it is dead-lettered."""
    return (
        isinstance(error, NewerVersionError)
        and entry.delivery_count < retry.unknown_type_deliveries
    )


def versions_of(route: Route) -> Versions:
    """The schema versions of ``route``'s type (version 1, no upcast, unless given)."""
    parse = route.parse
    return parse.versions if isinstance(parse, EntryReader) else NO_VERSIONS
