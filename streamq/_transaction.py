"""Redis effects with the ack: ``async with msg.transaction() as tx:`` collects Redis
commands that run in the same script as the entry's ack (after the fencing check in ordered
mode), so that they happen once per entry, or not at all (docs/guides/effects.md).

A :class:`Transaction` only records: each method checks its command at once (through the
consumer's staging, :mod:`streamq.consume.outputs`) and keeps it; leaving the block
normally stages the commands on the Message, next to its ``msg.publish`` outputs; leaving
it with an exception stages none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol

from .errors import ConfigError

Value = str | bytes | int | float


class CommandStaging(Protocol):
    """What checks a transaction's commands: the consumer's staging of outputs."""

    def source(self) -> str:
        """The stream the entry comes from; ConfigError where there is no ack."""

    def command(self, args: Sequence[bytes | str], keys: Sequence[str]) -> Any:
        """One command, checked (ConfigError: refused in a script, or a key off the source
        slot on a cluster)."""


class Transaction:
    """Redis commands run with the entry's ack: after its ``XACK``, only if that ack took
    the entry out of the group's pending list, in one script. Made by
    :meth:`streamq.Message.transaction`; use it as ``async with`` (or ``with`` in a plain
    ``def`` handler).

    Each method stages one command and returns nothing: the commands have not run yet (a
    handler cannot read their effects back). Values are ``str``, ``bytes``, ``int`` or
    ``float``. Every method raises :class:`~streamq.ConfigError` at once for a key off the
    source stream's slot on a Redis Cluster (use :meth:`key`), a command a script may not
    run, a value of another type, or a transaction already closed.
    """

    __slots__ = ("_closed", "_commands", "_stage", "_staging", "stream")

    def __init__(self, staging: CommandStaging, stage: Callable[[list[Any]], None]) -> None:
        self.stream = staging.source()  # the (partition) stream of the entry
        self._staging, self._stage = staging, stage
        self._commands: list[Any] = []
        self._closed = False

    def key(self, name: str) -> str:
        """``{<stream>}:<name>``: a key on the slot of the stream the entry comes from (the
        partition's stream on a partitioned topic), which a transaction may use on a
        cluster."""
        return f"{{{self.stream}}}:{name}"

    # -- the commands ---------------------------------------------------------------
    def set(self, key: str, value: Value, *, ttl: float | timedelta | None = None) -> None:
        """``SET key value`` (``ttl``: ``PX``, in seconds)."""
        extra: list[Value] = [] if ttl is None else ["PX", _ms(ttl)]
        self.call("SET", key, value, *extra, keys=[key])

    def delete(self, *keys: str) -> None:
        """``DEL keys...``."""
        self.call("DEL", *keys, keys=keys)

    def incrby(self, key: str, amount: int = 1) -> None:
        """``INCRBY key amount``."""
        self.call("INCRBY", key, _int(amount), keys=[key])

    def hset(self, key: str, mapping: Mapping[str, Value]) -> None:
        """``HSET key field value...``."""
        self.call("HSET", key, *_pairs(mapping.items()), keys=[key])

    def hincrby(self, key: str, field: str, amount: int = 1) -> None:
        """``HINCRBY key field amount``."""
        self.call("HINCRBY", key, field, _int(amount), keys=[key])

    def sadd(self, key: str, *members: Value) -> None:
        """``SADD key members...``."""
        self.call("SADD", key, *members, keys=[key])

    def srem(self, key: str, *members: Value) -> None:
        """``SREM key members...``."""
        self.call("SREM", key, *members, keys=[key])

    def zadd(self, key: str, mapping: Mapping[str, float]) -> None:
        """``ZADD key score member...`` (``mapping``: member -> score)."""
        scores: list[Value] = [v for m, s in mapping.items() for v in (_float(s), m)]
        self.call("ZADD", key, *scores, keys=[key])

    def expire(self, key: str, ttl: float | timedelta) -> None:
        """``PEXPIRE key ms`` (``ttl`` in seconds)."""
        self.call("PEXPIRE", key, _ms(ttl), keys=[key])

    def publish(self, channel: str, message: Value) -> None:
        """``PUBLISH channel message`` (pub/sub, no key: sent when the entry is acked)."""
        self.call("PUBLISH", channel, message, keys=[])

    def xadd(self, stream: str, fields: Mapping[str, Value], *, maxlen: int | None = None) -> None:
        """``XADD stream [MAXLEN ~ maxlen] * field value...``: raw fields (a message for
        streamq's consumers is staged with :meth:`streamq.Message.publish`)."""
        cap: list[Value] = [] if maxlen is None else ["MAXLEN", "~", _int(maxlen)]
        self.call("XADD", stream, *cap, "*", *_pairs(fields.items()), keys=[stream])

    def call(self, command: str, *args: Value, keys: Iterable[str]) -> None:
        """Any other command: ``keys`` names every key among ``args`` (checked on a cluster,
        declared to the script)."""
        if self._closed:
            raise ConfigError("this transaction is closed: stage commands inside its block")
        named = list(keys)
        words = [_text(a) for a in (command, *args)]
        missing = [k for k in named if k not in words[1:]]
        if missing:
            raise ConfigError(f"keys {missing!r} are not among the command's arguments")
        self._commands.append(self._staging.command(words, named))

    # -- the block ------------------------------------------------------------------
    async def __aenter__(self) -> Transaction:
        return self.__enter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(kind, error, tb)

    def __enter__(self) -> Transaction:
        if self._closed:
            raise ConfigError("a transaction is used once: call msg.transaction() again")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
        if kind is None and self._commands:
            self._stage(self._commands)


def _text(value: Value) -> str | bytes:
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"a transaction's values are str, bytes, int or float, not "
                          f"{type(value).__name__}")  # fmt: skip
    return repr(value)


def _int(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"expected an int, got {type(value).__name__}")
    return value


def _float(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"a score is a number, not {type(value).__name__}")
    return value


def _ms(ttl: float | timedelta) -> int:
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else _float(ttl)
    if seconds <= 0:
        raise ConfigError(f"a TTL must be positive, got {seconds}s")
    return max(1, round(seconds * 1000))


def _pairs(items: Iterable[tuple[str, Value]]) -> list[Value]:
    pairs = [v for pair in items for v in pair]
    if not pairs:
        raise ConfigError("no fields given")
    return pairs
