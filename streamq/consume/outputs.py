"""Outputs with the ack: what ``msg.publish(...)`` stages inside a handler, and how a
consumer writes the staged outputs of its handled entries together with their acks
(the scripts and the outbox are :mod:`streamq.wire.outputs`).

A handler's outputs are encoded when staged (:class:`Staging`, as ``mq.publish`` encodes
them) and kept on its Message; only a handler that succeeded hands them to the acker with
its entry's ID (:meth:`~streamq.consume.acks.Acker.ack_with`), so those of a failed attempt
are dropped with it. The acker's flush writes each entry's outputs and its ack in one
script (:class:`OutputWriter`): on one server, or on a cluster for targets on the source
stream's slot, straight into their streams; on a cluster, targets on other slots go to the
source's outbox in the same script, and :mod:`.forwarding` moves them on.

A transaction's commands (``msg.transaction()``) are staged the same way, as
:class:`Command` items among the entry's outputs, checked when staged (a command a script
may not run; on a cluster, a key off the source stream's slot: ConfigError in the handler),
and run by the same script after the ack.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from ..errors import ConfigError
from ..wire import outputs as wire
from ..wire.keys import Keys, validate_stream_name
from ..wire.slots import slot_of
from .staging import Key, OutputSettings

log = logging.getLogger(__name__)


class Output:
    """One staged output: its target stream and fields, packed as RESP bulk strings when
    staged (``maxlen``/``ttl``: a request's reply, written capped and expiring as replies
    are)."""

    __slots__ = ("count", "fields", "maxlen", "target", "ttl")

    def __init__(
        self, target: str, fields: dict[bytes | str, bytes | str], maxlen: str = "", ttl: str = ""
    ) -> None:
        self.target, self.maxlen, self.ttl = target, maxlen, ttl
        self.fields = wire.field_bulks(fields)
        self.count = 2 * len(fields)


class Command:
    """One staged command of a transaction: its arguments packed as RESP bulk strings (the
    command's name first) and the keys it names."""

    __slots__ = ("count", "keys", "packed")

    def __init__(self, args: Sequence[bytes | str], keys: Sequence[str]) -> None:
        self.packed = wire.bulks(list(args))
        self.count, self.keys = len(args), keys


class Staging:
    """Encodes the outputs staged by the handlers of one group's entries of one source
    stream (``msg.publish``), and checks their transactions' commands."""

    def __init__(self, settings: OutputSettings, stream: str) -> None:
        self._settings = settings
        self.stream, self._slot = stream, slot_of(stream)
        self._targets: dict[str, str] = {}  # stream names checked (a handler names a few)

    def output(
        self,
        type_name: str,
        data: Any,
        stream: str | None,
        key: Key | None,
        meta: Mapping[str, str] | None,
    ) -> Output:
        settings = self._settings
        fields = settings.codec.entry(type_name, data, meta, key)
        if stream is None or stream == settings.topic:
            target = settings.streams[settings.partition(key)]
        else:
            target = self._targets.get(stream) or self._checked(stream)
        return Output(target, fields)

    def _checked(self, stream: str) -> str:
        if len(self._targets) > 1000:  # names made per entry: checked each time
            self._targets.clear()
        self._targets[stream] = validate_stream_name(stream)
        return stream

    def source(self) -> str:
        """The stream the entries come from: a transaction's keys live on its slot."""
        return self.stream

    def command(self, args: Sequence[bytes | str], keys: Sequence[str]) -> Command:
        """A transaction's command, checked: one a script may run, and on a cluster, keys on
        the source stream's slot only; else ConfigError."""
        name = args[0].decode() if isinstance(args[0], bytes) else args[0]
        if name.upper() in wire.REFUSED_COMMANDS:
            raise ConfigError(
                f"{name.upper()} cannot run in a transaction: it runs inside the script of "
                "the entry's ack, where blocking commands, MULTI, scripts, subscriptions and "
                "server or connection commands are refused"
            )
        if self._settings.cluster():
            for key in keys:
                if slot_of(key) != self._slot:
                    raise ConfigError(
                        f"key {key!r} is on slot {slot_of(key)}, and a transaction runs with "
                        f"the ack of an entry of {self.stream!r}, on slot {self._slot}: on a "
                        f"Redis Cluster name keys with its hash tag, e.g. tx.key(...) "
                        f"({{{self.stream}}}:<name>)"
                    )
        return Command(args, keys)


Staged = tuple[str, Sequence[Output | Command]]  # an entry's ID, its outputs and commands


class OutputWriter:
    """Writes handled entries' outputs with their acks, for one source stream and group."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        *,
        cluster: Callable[[], bool],
        outboxed: Callable[[], None] = lambda: None,
        failed: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        """``failed(entry_id, reason)``: called for an entry whose transaction stopped at
        a failing command (:mod:`.failed_transactions` dead-letters it)."""
        self._client, self._stream, self._group = client, stream, group
        self._outbox, self._slot = Keys(stream).outbox, slot_of(stream)
        self._cluster, self._outboxed, self._failed = cluster, outboxed, failed

    async def write(self, staged: Sequence[Staged], fence: tuple[str, str, str] | None) -> bool:
        """Add the outputs of ``staged`` entries that are still pending, and ack them, in one
        script; ``fence``: ordered mode's (lease key, me, token). False when the lease is
        not held (nothing was done)."""
        keys = [self._stream, self._outbox]
        head: list[bytes | str] = [self._group]
        if fence is not None:
            keys.insert(0, fence[0])
            head = [fence[1], fence[2], self._group]
        packed, outboxed = self._packed(staged, keys)
        script = wire.WRITE if fence is None else wire.WRITE_FENCED
        reply = await wire.run_packed(self._client, script, keys, head, packed, self._stream)
        if reply[0] == 0:
            return False
        reasons: dict[str, list[str]] = {}  # an entry's failures: one dead letter says all
        for entry_id, index, name, error, *output in reply[2]:
            reason = _failure(index, name.decode(), error.decode(), output=bool(output))
            log.error("%s of entry %s on %s: %s", "output" if output else "transaction",
                      entry_id.decode(), self._stream, reason)  # fmt: skip
            reasons.setdefault(entry_id.decode(), []).append(reason)
        if self._failed is not None:
            for entry_id, said in reasons.items():
                await self._failed(entry_id, "; and ".join(said))
        if outboxed:
            self._outboxed()
        return True

    def _packed(self, staged: Sequence[Staged], keys: list[str]) -> tuple[wire.Packed, bool]:
        """The script's per-entry arguments (adding the targets to ``keys``), and whether
        any output goes to the outbox."""
        index = {self._stream: len(keys) - 1}  # KEYS is 1-based: the stream comes before
        outbox = len(keys)  # the outbox, the last key so far
        cluster = self._cluster()
        packed = wire.Packed()
        outboxed = False
        for entry_id, outputs in staged:
            packed.entry(entry_id, len(outputs))
            n = -1  # the output's index among its entry's outputs (its name for good)
            for output in outputs:
                if isinstance(output, Command):  # declared in KEYS, run after the ack
                    for key in output.keys:
                        if key not in index:
                            keys.append(key)
                            index[key] = len(keys)
                    packed.call(output.count, output.packed)
                    continue
                n += 1
                if cluster and slot_of(output.target) != self._slot:
                    outboxed = True
                    head = wire.bulks([v for pair in zip(wire.OUTBOX_FIELDS,
                                       [output.target, self._stream, entry_id, str(n)],
                                       strict=True) for v in pair])  # fmt: skip
                    packed.output(outbox, "", "", output.count + 8, head + output.fields)
                    continue
                k = index.get(output.target)
                if k is None:
                    keys.append(output.target)
                    k = index[output.target] = len(keys)
                packed.output(k, output.maxlen, output.ttl, output.count, output.fields)
        return packed, outboxed


def _failure(index: int, name: str, error: str, *, output: bool) -> str:
    """Why an acked entry's output or transaction command failed in the ack's script."""
    if output:  # its stream refused it (a key of another type)
        return (
            f"its output {index + 1} to {name!r} was refused: {error}; the entry is acked, "
            "its outputs before it written, it and those after it not"
        )
    return (
        f"its transaction stopped at its command {index + 1} ({name}): {error}; the entry "
        "is acked, the commands before it applied, it and those after it not"
    )
