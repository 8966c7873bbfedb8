"""The Message envelope and wire format v1.

An entry has the fields ``type`` (routing key, 1-128 chars of ``[A-Za-z0-9_.:-]``),
``data`` (JSON), optionally ``meta`` (a JSON object of strings) and ``key`` (the publish
key, UTF-8 text: ordered consumption keeps the entries of one key in order). Any Redis client can
produce one: ``XADD task-stream '*' type email data '{"to":"a@b.c"}'``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import pydantic_core
from pydantic import BaseModel

from ._ids import StreamId
from .errors import ConfigError, MessageFormatError

if TYPE_CHECKING:
    from ._transaction import Transaction

T = TypeVar("T")

TYPE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_FIELD_TYPE, _FIELD_DATA, _FIELD_META, _FIELD_KEY = b"type", b"data", b"meta", b"key"
# Every field of the wire format, in the order written: what a dead letter keeps of its
# entry and a replay writes back (``ver``, ``enc``, ``kid`` only when an entry has them).
WIRE_FIELDS = (_FIELD_TYPE, _FIELD_DATA, _FIELD_META, _FIELD_KEY, b"ver", b"enc", b"kid")
# ``pub``: "<producer>.<sequence>", written by streamq's publishers so that a publish sent
# again after an unknown outcome finds its first write (streamq.publish.resend). Not part
# of the message: consumers ignore it, a dead letter does not keep it (a replay is a new
# publish).
PUBLISH_MARKER = b"pub"


class OutputStaging(Protocol):
    """Where a Message's :meth:`Message.publish` stages its outputs (and
    :meth:`Message.transaction` checks its commands: a ``CommandStaging`` of
    :mod:`streamq._transaction`): the consumer's part that encodes them and knows their
    stream (a hand-built Message has none)."""

    def output(
        self,
        type_name: str,
        data: Any,
        stream: str | None,
        key: str | bytes | None,
        meta: Mapping[str, str] | None,
    ) -> Any:
        """One output, encoded; raises ConfigError where outputs cannot be written."""

    def source(self) -> str:
        """The stream the entry comes from; ConfigError where there is no ack."""

    def command(self, args: Sequence[bytes | str], keys: Sequence[str]) -> Any:
        """One command, checked (ConfigError: refused in a script, or a key off the source
        slot on a cluster)."""


class Message(Generic[T]):
    """One delivered entry: its ID, routing type, typed ``data`` and string ``meta``.

    On a partitioned topic ``id`` names the partition (``"3:1700000000000-0"``, as
    ``publish`` returned it), ``stream`` is the topic and ``partition`` the index (0 on a
    plain stream). ``key`` is the publish key (None when the entry has none);
    ``fencing_token`` is set by an ordered consumer (None otherwise): it grows with each new
    owner of the partition, so a sink can refuse a write carrying an older one.
    ``priority`` is the level the entry was published at on a topic with priorities (0 the
    highest; ``publish(..., priority=)``, the middle level by default), None on a topic
    without priorities."""

    __slots__ = (
        "_outputs", "_staging", "data", "delivery_count", "fencing_token", "group", "id", "key",
        "meta", "partition", "priority", "stream", "type",
    )  # fmt: skip

    def __init__(
        self,
        id: str,
        type: str,
        data: T,
        meta: dict[str, str],
        delivery_count: int,
        stream: str,
        group: str,
        partition: int = 0,
        key: str | None = None,
        fencing_token: int | None = None,
        staging: OutputStaging | None = None,
        priority: int | None = None,
    ) -> None:
        self._staging = staging
        self.priority = priority
        self._outputs: list[Any] | None = None  # staged by publish(), written with the ack
        self.id = id
        self.key = key
        self.fencing_token = fencing_token
        self.partition = partition
        self.type = type
        self.data = data
        self.meta = meta
        self.delivery_count = delivery_count
        self.stream = stream
        self.group = group

    @property
    def idempotency_key(self) -> str:
        """A stable name of this entry for this group, for a sink that applies each entry
        once (:mod:`streamq.effects.postgres`, or a unique key of your own):
        ``"<stream>/<group>/<id>"``, the same on every delivery of the entry and distinct
        for every other entry or group. ``%`` and ``/`` in the stream and group names are
        written ``%25`` and ``%2F``, so that two names never give one key."""
        return f"{_escaped(self.stream)}/{_escaped(self.group)}/{self.id}"

    def publish(
        self,
        type: str,
        data: Any,
        *,
        stream: str | None = None,
        key: str | bytes | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> None:
        """Stage an output of this entry's handler: a message written together with the
        entry's acknowledgement, atomically, or not at all (docs/guides/effects.md).

        ``type``, ``data``, ``key`` and ``meta`` are those of ``mq.publish``, encoded as it
        encodes them (the handler's queue's payload settings). ``stream``: the stream the
        output goes to (default: the handler's own topic, its partition chosen by ``key``
        as ``publish`` chooses it; another name is written as a plain stream). A handler
        that fails, raises a signal (Retry, Reject, Throttle) or times out writes none of
        the outputs of that attempt; an entry handled twice writes each output once.

        :raises ConfigError: outside a consumer group's handler (a fan-out subscriber has
            no ack to write outputs with; a Message built by hand has no consumer).
        :raises MessageFormatError: ``type``, ``data``, ``key`` or ``meta`` cannot be
            written (as ``publish`` raises it).
        """
        staging = self._staging
        if staging is None:
            raise ConfigError(
                "Message.publish stages an output written with the entry's ack: it works "
                "inside a handler of a consumer group, not on a Message built by hand "
                "(publish it with mq.publish instead)"
            )
        output = staging.output(type, data, stream, key, meta)
        if self._outputs is None:
            self._outputs = [output]
        else:
            self._outputs.append(output)

    def transaction(self) -> Transaction:
        """Redis commands run with this entry's ack: ``async with msg.transaction() as tx:
        tx.hincrby(...)``. On leaving the block normally its commands are staged; with an
        exception, none. They run in the script that acks the entry (after the fencing check
        in ordered mode), after its ``XACK`` and only if that ack took it out of the pending
        list: once per entry, or not at all (docs/guides/effects.md).

        :raises ConfigError: outside a consumer group's handler (a fan-out subscriber, a
            Message built by hand); the transaction's methods raise it for a command that
            cannot run with the ack (see :class:`~streamq.Transaction`).
        """
        staging = self._staging
        if staging is None:
            raise ConfigError(
                "Message.transaction runs commands with the entry's ack: it works inside a "
                "handler of a consumer group, not on a Message built by hand"
            )
        # loaded on first use: a handler that runs no transaction never loads it
        from ._transaction import Transaction

        return Transaction(staging, self._stage)

    def _stage(self, commands: list[Any]) -> None:
        if self._outputs is None:
            self._outputs = list(commands)
        else:
            self._outputs.extend(commands)

    @property
    def published_at(self) -> datetime:
        """When the entry was added to the stream (from its ID), in UTC."""
        return StreamId.parse(self.id.rpartition(":")[2]).timestamp

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, type={self.type!r}, data={self.data!r})"


def _escaped(name: str) -> str:
    """``name`` with ``%`` and ``/`` percent-escaped (one part of an idempotency key)."""
    return name.replace("%", "%25").replace("/", "%2F")


def validate_type_name(name: str) -> str:
    """Return ``name`` if it is a valid routing type, else raise MessageFormatError."""
    if not isinstance(name, str) or TYPE_PATTERN.fullmatch(name) is None:
        raise MessageFormatError(
            f"invalid message type {name!r}: use 1-128 characters of [A-Za-z0-9_.:-]"
        )
    return name


def encode_entry(
    type_name: str,
    data: BaseModel | Any,
    meta: Mapping[str, str] | None = None,
    key: str | bytes | None = None,
) -> dict[bytes | str, bytes | str]:
    """The XADD fields for one message (``key``: the publish key, written as the ``key``
    field; MessageFormatError if it is not text)."""
    validate_type_name(type_name)
    if isinstance(data, BaseModel):
        payload = data.__pydantic_serializer__.to_json(data)
    else:
        try:
            payload = pydantic_core.to_json(data)
        except pydantic_core.PydanticSerializationError as e:
            raise MessageFormatError(f"data of type {type(data).__name__} is not JSON: {e}") from e
    fields: dict[bytes | str, bytes | str] = {_FIELD_TYPE: type_name, _FIELD_DATA: payload}
    if meta:
        fields[_FIELD_META] = pydantic_core.to_json(_checked_meta(meta))
    if key is not None:
        fields[_FIELD_KEY] = _checked_key(key)
    return fields


def _checked_key(key: str | bytes) -> str | bytes:
    """``key`` if it is text (a str, or bytes of UTF-8), else MessageFormatError (bytes that
    are not UTF-8: a consumer hands the key to handlers as ``Message.key``, a str) or
    ConfigError (neither str nor bytes)."""
    if isinstance(key, bytes):
        try:
            key.decode()
        except UnicodeDecodeError:
            raise MessageFormatError(f"key {key!r} is not UTF-8 text") from None
        return key
    if not isinstance(key, str):
        # as the partition's choice has always said it (a wrong argument, not a wrong message)
        raise ConfigError(f"key must be str or bytes, got {type(key).__name__}")
    return key


def decode_key(raw: bytes | None) -> str | None:
    """The ``key`` field as text (None when absent); MessageFormatError if not UTF-8."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise MessageFormatError("'key' is not UTF-8 text") from None


def _checked_meta(meta: Mapping[str, str]) -> dict[str, str]:
    """``meta`` as a dict, or MessageFormatError naming every key or value that is not a
    string (a consumer would otherwise receive ``"None"`` or ``"True"``)."""
    if not isinstance(meta, Mapping):
        raise MessageFormatError(
            f"meta must be a mapping of strings to strings, got {_a(type(meta).__name__)}"
        )
    wrong = [
        f"key {k!r} is {_a(type(k).__name__)}" if not isinstance(k, str)
        else f"{k!r} is {'None' if v is None else _a(type(v).__name__)}"
        for k, v in meta.items()
        if not (isinstance(k, str) and isinstance(v, str))
    ]  # fmt: skip
    if wrong:
        raise MessageFormatError(f"meta must map strings to strings: {_listed(wrong)}")
    return dict(meta)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _listed(items: list[str], most: int = 10) -> str:
    """The first ``most`` items, and how many were left out (a foreign entry can carry
    thousands: the reason goes into a dead letter and a log line)."""
    text = ", ".join(items[:most])
    return f"{text} and {len(items) - most} more" if len(items) > most else text


_JSON_KINDS = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
               dict: "an object", list: "an array"}  # fmt: skip
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:-]+")


def _json_kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _key_text(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) else repr(key)


@dataclass(slots=True)
class RawEntry:
    """An entry as read from Redis, before its ``data`` is parsed."""

    id: str
    fields: dict[bytes, bytes]
    delivery_count: int = 1

    @property
    def type(self) -> str | None:
        raw = self.fields.get(_FIELD_TYPE)
        return raw.decode("utf-8", "replace") if raw is not None else None

    def check_type(self) -> str:
        """The routing type, or raise MessageFormatError naming what is wrong."""
        raw = self.fields.get(_FIELD_TYPE)
        if raw is None:
            raise MessageFormatError("entry has no 'type' field")
        return validate_type_name(raw.decode("utf-8", "replace"))

    def decode_meta(self) -> dict[str, str]:
        """The ``meta`` field as a dict of strings, or raise MessageFormatError."""
        raw = self.fields.get(_FIELD_META)
        if not raw:
            return {}
        try:
            meta = pydantic_core.from_json(raw)
        except ValueError as e:
            raise MessageFormatError(f"'meta' is not JSON: {e}") from e
        if not isinstance(meta, dict):
            raise MessageFormatError("'meta' must be a JSON object")
        wrong = [
            f"{_key_text(k)} is {_json_kind(v)}" for k, v in meta.items() if type(v) is not str
        ]
        if wrong:
            # Rendering them (None -> "None") would hand handlers a value nobody sent.
            raise MessageFormatError(f"'meta' values must be strings: {_listed(wrong)}")
        return meta

    def raw_data(self) -> bytes:
        """The ``data`` field, or raise MessageFormatError if it is missing."""
        raw = self.fields.get(_FIELD_DATA)
        if raw is None:
            raise MessageFormatError("entry has no 'data' field")
        return raw
