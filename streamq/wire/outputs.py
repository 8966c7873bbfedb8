"""Outputs with the ack on the wire: the script that writes a handler's staged outputs with
its entry's ack (fenced in ordered mode), the outbox that carries the outputs bound for
another slot of a cluster, and the script that forwards an outbox entry to its target once.

Writing (:data:`WRITE`, :data:`WRITE_FENCED`): for each entry, ``XACK`` first; only an entry
that this ack took out of the pending list (``XACK`` answered 1) gets its outputs added. A
flush sent again after a lost reply, or a second run of the entry's handler (claimed from a
consumer that was slow, not dead), therefore adds nothing more: each output exists once.

The outbox ``streamq:{<source stream>}:outbox`` (on the source's slot, so in the same script
as the ack) holds the outputs whose target lives on another slot. Each outbox entry starts
with four fields, then the output's own: ``target`` (the stream it goes to), ``source``
(the source stream), ``entry`` (the source entry's ID) and ``index`` (the output's place
among that entry's outputs, from 0). ``source``/``entry``/``index`` name the output for
good: :data:`FORWARD` adds it to its target only if that name is not yet in the target's
dedupe set ``streamq:{<target>}:forwarded`` (a sorted set: name -> when it was forwarded,
trimmed to :data:`DEDUPE_WINDOW_MS`), in one script on the target's slot. The forwarder then
deletes the outbox entry; a forwarder that died in between leaves it, and the next one finds
the name in the dedupe set and only deletes it.

A transaction's commands (``msg.transaction()``) run in the same script, after the entry's
``XACK`` and only if it answered 1, in the order staged, with ``redis.pcall``: Redis does
not undo what a script did before an error, so a command that fails (``WRONGTYPE``) cannot
take back the ack or the commands before it. It stops its entry's remaining commands and is
returned to the caller, which logs it; the other entries of the call go on.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx

from . import resp
from .ownership_scripts import _NOW, _VALID
from .translate import translate

# the four fields an outbox entry starts with, in this order
OUTBOX_FIELDS = (b"target", b"source", b"entry", b"index")
# how long a forwarded output's name is kept in its target's dedupe set: an outbox entry
# left by a forwarder that died is forwarded again long before (within seconds)
DEDUPE_WINDOW_MS = 86_400_000

# One entry after another: ``id, n`` then ``n`` outputs, each ``key index, maxlen ('' none),
# ttl ms ('' none), field count, fields...``; key index 0 is a command of a transaction
# (``msg.transaction()``): ``0, '', '', argument count, the command and its arguments``.
# A command, and an output's XADD, run with pcall: the first command that fails stops its
# entry's later commands, the first output refused its later outputs; each is reported (entry
# ID, its index among the entry's commands or outputs, the command's name or the output's
# key, the error, and for an output 'output').
# Variables: S the source stream, G the group, I the first block's ARGV index.
_BODY = """
local written, failed, i = 0, {}, I
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  local acked = redis.call('XACK', S, G, id)
  local commands, outputs, broken, refused = 0, 0, false, false
  for _ = 1, n do
    local k, maxlen, ttl, nf = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    i = i + 4
    if acked == 1 and k == 0 then
      commands = commands + 1
      if not broken then
        local reply = redis.pcall(unpack(ARGV, i, i + nf - 1))
        if type(reply) == 'table' and reply.err then
          broken = true
          table.insert(failed, {id, commands - 1, ARGV[i], reply.err})
        end
      end
    elseif acked == 1 then
      outputs = outputs + 1
      if not refused then
        local reply
        if maxlen == '' then
          reply = redis.pcall('XADD', KEYS[k], '*', unpack(ARGV, i, i + nf - 1))
        else
          reply = redis.pcall('XADD', KEYS[k], 'MAXLEN', '~', maxlen, '*',
                              unpack(ARGV, i, i + nf - 1))
        end
        if type(reply) == 'table' and reply.err then
          refused = true
          table.insert(failed, {id, outputs - 1, KEYS[k], reply.err, 'output'})
        else
          if ttl ~= '' then redis.call('PEXPIRE', KEYS[k], ttl) end
          written = written + 1
        end
      end
    end
    i = i + nf
  end
end
return {1, written, failed}
"""

# KEYS: the source stream, its outbox, the targets and the commands' keys. ARGV: group, then
# the entries' blocks. Returns {1, outputs written, the commands that failed}.
WRITE = "local S, G, I = KEYS[1], ARGV[1], 2\n" + _BODY

# KEYS: the partition's lease hash, the source stream, its outbox, the targets. ARGV: me,
# token, group, then the entries' blocks. Returns {0} when the lease is not held (nothing
# written, nothing acked), else {1, outputs written, the commands that failed}.
WRITE_FENCED = (
    _NOW + _VALID + "if not valid then return {0} end\n"
    "local S, G, I = KEYS[2], ARGV[3], 4\n" + _BODY
)

# KEYS: the target stream, its dedupe set. ARGV: the dedupe window (ms), then per output,
# in the outbox's order: its name, the number of its field and value items, those items.
# Adds each output whose name is not in the dedupe set; returns how many it added.
FORWARD = (
    _NOW
    + """
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
local added, i = 0, 2
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  if not redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 2, i + 1 + n))
    redis.call('ZADD', KEYS[2], now, ARGV[i])  -- after: an XADD refused marks nothing
    added = added + 1
  end
  i = i + 2 + n
end
redis.call('PEXPIRE', KEYS[2], window)
return added
"""
)


def forward_args(outputs: list[tuple[str, list[bytes | str]]]) -> list[bytes | str]:
    """:data:`FORWARD`'s arguments after the window for ``outputs`` (name, fields)."""
    args: list[bytes | str] = []
    for name, fields in outputs:
        args += [name, str(len(fields)), *fields]
    return args


# Commands a transaction may not stage: those a script may not run (blocking, MULTI, another
# script, pub/sub subscriptions, connection and server state) and those that would reach
# beyond the entry's keys. ConfigError at staging, rather than an error at the ack.
REFUSED_COMMANDS = frozenset((
    "ACL", "AUTH", "BGREWRITEAOF", "BGSAVE", "BLMOVE", "BLMPOP", "BLPOP", "BRPOP",
    "BRPOPLPUSH", "BZMPOP", "BZPOPMAX", "BZPOPMIN", "CLIENT", "CLUSTER", "CONFIG", "DEBUG",
    "DISCARD", "EVAL", "EVALSHA", "EVALSHA_RO", "EVAL_RO", "EXEC", "FAILOVER", "FCALL",
    "FCALL_RO", "FLUSHALL", "FLUSHDB", "FUNCTION", "HELLO", "KEYS", "MIGRATE", "MODULE",
    "MONITOR", "MOVE", "MULTI", "PSUBSCRIBE", "PSYNC", "PUNSUBSCRIBE", "QUIT", "READONLY",
    "READWRITE", "REPLCONF", "REPLICAOF", "RESET", "SAVE", "SCAN", "SCRIPT", "SELECT",
    "SHUTDOWN", "SLAVEOF", "SSUBSCRIBE", "SUBSCRIBE", "SUNSUBSCRIBE", "SWAPDB", "SYNC",
    "UNSUBSCRIBE", "UNWATCH", "WAIT", "WAITAOF", "WATCH", "XREAD", "XREADGROUP"
))  # fmt: skip


# the RESP bulk strings of small numbers (key indexes, field counts, output counts)
_NUMBERS = [b"$%d\r\n%d\r\n" % (len(str(n)), n) for n in range(1024)]
_NO_OPTIONS = b"$0\r\n\r\n" * 2  # no MAXLEN, no TTL


def bulks(values: list[bytes | str]) -> bytes:
    """``values`` as RESP bulk strings, joined (an output's fields, packed once when
    staged: the write then joins bytes)."""
    return b"".join(
        [
            b"$%d\r\n%s\r\n" % (len(raw), raw)
            for raw in (v if v.__class__ is bytes else v.encode() for v in values)  # type: ignore[union-attr]
        ]
    )


_NAMES: dict[bytes | str, bytes] = {}  # the bulk strings of field names (a few)


def field_bulks(fields: dict[bytes | str, bytes | str]) -> bytes:
    """An entry's fields (name, value pairs) as RESP bulk strings, joined."""
    names, parts = _NAMES, []
    for name, value in fields.items():
        head = names.get(name)
        if head is None:
            head = bulks([name])
            if len(names) < 64:  # streamq's own names, and a few of a foreign entry's
                names[name] = head
        raw = value if value.__class__ is bytes else value.encode()  # type: ignore[union-attr]
        parts.append(head + b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def number(n: int) -> bytes:
    """``n`` as a RESP bulk string."""
    return _NUMBERS[n] if n < 1024 else bulks([str(n)])


class Packed:
    """The arguments of one write script call, packed as they are added."""

    __slots__ = ("count", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.count = 0

    def entry(self, entry_id: str, outputs: int) -> None:
        self.parts.append(b"$%d\r\n%s\r\n" % (len(entry_id), entry_id.encode()) + number(outputs))
        self.count += 2

    def output(self, key: int, maxlen: str, ttl: str, fields: int, packed: bytes) -> None:
        """One output: the index of its key, XADD's MAXLEN and a TTL ('' none), its
        fields' count and their bulk strings."""
        if maxlen or ttl:
            self.parts.append(number(key) + bulks([maxlen, ttl]) + number(fields) + packed)
        else:
            numbers = _NUMBERS
            self.parts.append(numbers[key] + _NO_OPTIONS + numbers[fields] + packed)
        self.count += 4 + fields

    def call(self, count: int, packed: bytes) -> None:
        """One command of a transaction: key index 0, no options, its ``count`` arguments
        (the command's name first) as bulk strings."""
        self.parts.append(_NUMBERS[0] + _NO_OPTIONS + number(count) + packed)
        self.count += 4 + count

    def command(
        self, script: str, keys: list[str], head: list[bytes | str], *, load: bool
    ) -> bytes:
        """``EVALSHA sha nkeys keys.. head.. <the added arguments>`` (``load``: ``EVAL``
        with the script)."""
        call = ["EVAL", script] if load else ["EVALSHA", resp.script_sha(script)]
        args = [*call, str(len(keys)), *keys, *head]
        return b"*%d\r\n" % (len(args) + self.count) + bulks(args) + b"".join(self.parts)


async def run_packed(
    client: aioredis.Redis,
    script: str,
    keys: list[str],
    head: list[bytes | str],
    packed: Packed,
    stream: str,
) -> Any:
    """Run ``script`` with ``packed`` arguments (``EVALSHA``, ``EVAL`` when the server
    lacks it); streamq's error for an error reply."""
    command = packed.command(script, keys, head, load=False)
    (reply,) = await resp.execute(client, command, 1, raise_errors=False)
    if isinstance(reply, rx.NoScriptError):
        command = packed.command(script, keys, head, load=True)
        (reply,) = await resp.execute(client, command, 1, raise_errors=False)
    if isinstance(reply, rx.ResponseError):
        raise translate(reply, stream) from reply
    return reply


def output_name(source: str, entry_id: str, index: int | str) -> str:
    """The name of one output for good (its dedupe name): ``<source>/<entry ID>/<index>``."""
    return f"{source}/{entry_id}/{index}"
