"""Idempotent publishing: ``publish(..., idempotency_key=k)`` adds at most one entry per key.

A producer that lost the reply of a publish (a cut connection, a crash before it recorded
the ID) cannot know whether the entry was added; publishing again with the same key is
then safe: the first entry's ID comes back and nothing is added.

* Redis >= 8.6 does it itself: ``XADD stream IDMP streamq:<b> <key> * ...`` (probed once,
  see :mod:`.features`). The server remembers keys for its ``IDMP-DURATION`` (default
  100 s) and the last ``IDMP-MAXSIZE`` (default 100) keys per producer: the keys are spread
  over :data:`PRODUCERS` producers by their CRC32 (``b``), so a retry still finds its key
  after a few thousand other publishes, not only after 100. Raise both with ``XCFGSET`` for
  longer retries.
* Elsewhere (Valkey, older Redis) a script adds the entry and remembers the key for
  ``WINDOW`` in ``streamq:{<stream>}:idmp:<key>`` (the stream's slot), atomically.
"""

from __future__ import annotations

import zlib
from typing import Any

import redis
import redis.asyncio as aioredis

from ..errors import MessageFormatError
from ..wire.keys import Keys
from ..wire.replies import added_id

PRODUCERS = 64  # IDMP producer-ids ("streamq:0".."streamq:63") the keys are spread over
WINDOW = 3600.0  # seconds the fallback remembers a key
Fields = dict[bytes | str, bytes | str]

# KEYS: stream, the key's record. ARGV: window (ms), "NOMKSTREAM" or "" (create the
# stream if missing), then field, value, ... Nil when NOMKSTREAM finds no stream.
IDEMPOTENT_XADD = """
local seen = redis.call('GET', KEYS[2])
if seen then return seen end
local id
if ARGV[2] == 'NOMKSTREAM' then
  id = redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', unpack(ARGV, 3))
  if not id then return false end
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return id
"""


def checked_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise MessageFormatError(f"idempotency_key must be a non-empty string, got {key!r}")
    return key


def idmp_options(key: str) -> tuple[str, ...]:
    """The XADD options of the server's own idempotency (Redis >= 8.6): the key under the
    producer of its bucket, each producer remembering its own last ``IDMP-MAXSIZE`` keys."""
    return ("IDMP", f"streamq:{zlib.crc32(key.encode()) % PRODUCERS}", key)


def script_flag(make_stream: bool) -> str:
    """The script's ARGV[2]: "" makes the stream if missing, "NOMKSTREAM" does not."""
    return "" if make_stream else "NOMKSTREAM"


def record_key(stream: str, key: str) -> str:
    return f"{Keys(stream).prefix}idmp:{key}"


def fallback_command(stream: str, key: str, fields: Fields, *, make_stream: bool) -> list[Any]:
    """The fallback as one ``EVAL`` (what a pipeline with ``WAIT`` sends)."""
    keys, args = _script_call(stream, key, fields, make_stream=make_stream)
    return ["EVAL", IDEMPOTENT_XADD, len(keys), *keys, *args]


async def fallback_xadd(
    client: aioredis.Redis, stream: str, key: str, fields: Fields, *, make_stream: bool
) -> str:
    """The fallback for one publish (``EVALSHA``, the script loaded on first use); raises
    StreamMissing if the stream does not exist and ``make_stream`` is false."""
    keys, args = _script_call(stream, key, fields, make_stream=make_stream)
    return added_id(await client.register_script(IDEMPOTENT_XADD)(keys=keys, args=args))


def fallback_xadd_sync(
    client: redis.Redis, stream: str, key: str, fields: Fields, *, make_stream: bool
) -> str:
    """:func:`fallback_xadd` for a blocking client (the Publisher)."""
    keys, args = _script_call(stream, key, fields, make_stream=make_stream)
    return added_id(client.register_script(IDEMPOTENT_XADD)(keys=keys, args=args))


def _script_call(
    stream: str, key: str, fields: Fields, *, make_stream: bool
) -> tuple[list[str], list[Any]]:
    """The script's KEYS and ARGV for one entry."""
    flat = [item for pair in fields.items() for item in pair]
    return [stream, record_key(stream, key)], [int(WINDOW * 1000), script_flag(make_stream), *flat]
