"""Request-reply on the wire: where a reply goes, what it holds, and the script that writes
it (with the request's ack, in one step, on the request's own slot).

A request is an ordinary entry whose ``meta`` carries :data:`REPLY_TO` (the requesting
process's random ID) and :data:`REQUEST` (the request's ID). Its reply is an entry of the
stream ``streamq:{<the request's stream>}:reply:<requester>`` (on the request's slot, so
the reply and the ack are one script on a cluster too) with the fields ``request`` and
``data`` (the handler's return value as JSON) or ``error`` (why it failed); the reply to
an encrypted request is encrypted with the request's key (:mod:`streamq.payload.replies`).
The reply stream is capped and expires :data:`REPLY_TTL_MS` after its last reply.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

REPLY_TO = "streamq-reply-to"  # meta: the requesting process
REQUEST = "streamq-request"  # meta: the request's ID
REPLY_TTL_MS = 300_000  # a reply stream left by a requester that went away expires
REPLY_MAXLEN = 10_000  # replies kept per requester and stream (XADD MAXLEN ~)

# KEYS: the reply stream, the request's stream. ARGV: ttl (ms), maxlen, group ('' for no
# ack), the request's entry ID, then the reply's field, value pairs.
REPLY = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if ARGV[3] ~= '' then redis.call('XACK', KEYS[2], ARGV[3], ARGV[4]) end
return 1
"""


def is_request(meta: dict[str, str]) -> bool:
    return REQUEST in meta and REPLY_TO in meta


def reply_fields(request_id: str, result: Any = None, error: str | None = None) -> list[str]:
    """The fields of a reply: the result as JSON, or the error."""
    if error is not None:
        return ["request", request_id, "error", error]
    data = pydantic_core.to_json(result).decode()
    return ["request", request_id, "data", data]
