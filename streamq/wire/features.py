"""Stream commands newer than Redis 7.0, asked of the server once (``COMMAND DOCS``).

* ``XADD ... IDMP producer-id idempotent-id`` (Redis >= 8.6): the server drops an entry
  whose idempotency ID it has seen, and returns the first one's ID.
* ``XREADGROUP ... CLAIM min-idle-time`` (Redis >= 8.4): a read also takes over entries
  idle that long in other consumers' pending lists.

Valkey 9.1 (the embedded server) has neither: streamq's fallbacks are the tested default.
The probe asks which arguments the server documents for the command, not its version, so a
server that adds them later, or a fork that has them, is found too; a server without
``COMMAND DOCS`` (before 7.0) or a user not allowed to run it gets the fallbacks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from ..errors import AuthenticationFailedError, RedisFailure, ServerUnavailableError
from . import resp
from .replies import as_dict


@dataclass(frozen=True, slots=True)
class Features:
    xadd_idmp: bool = False
    xreadgroup_claim: bool = False


_DOCS = resp.pack("COMMAND", "DOCS", "XADD", "XREADGROUP")


async def probe(client: aioredis.Redis) -> Features:
    """What the server behind ``client`` supports (one round trip)."""
    try:
        (docs,) = await resp.execute(client, _DOCS, 1)
    except RedisFailure as e:
        return _without_docs(e)
    return _features(docs)


def probe_sync(client: redis.Redis) -> Features:
    """:func:`probe` for a blocking client (Spark executors)."""
    try:
        (docs,) = resp.execute_sync(client, _DOCS, 1)
    except RedisFailure as e:
        return _without_docs(e)
    return _features(docs)


def _without_docs(error: RedisFailure) -> Features:
    """The fallbacks when the server refused ``COMMAND DOCS`` (Redis < 7.0, NOPERM); a
    server out of reach or refusing the credentials is the caller's to handle."""
    if isinstance(error, ServerUnavailableError | AuthenticationFailedError):
        raise error
    return Features()


def _features(reply: Any) -> Features:
    docs = as_dict(reply)
    return Features(
        xadd_idmp=b"IDMP" in _tokens(docs.get(b"xadd")),
        xreadgroup_claim=b"CLAIM" in _tokens(docs.get(b"xreadgroup")),
    )


def _tokens(doc: Any) -> set[bytes]:
    """Every ``token`` of a command's documented arguments, at any depth, upper-cased."""
    found: set[bytes] = set()
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            node = [item for pair in node.items() for item in pair]
        if not isinstance(node, list):
            continue
        for key, value in itertools.pairwise(node):
            if key in (b"token", "token") and isinstance(value, bytes | str):
                found.add((value if isinstance(value, bytes) else value.encode()).upper())
        stack.extend(item for item in node if isinstance(item, list | dict))
    return found
