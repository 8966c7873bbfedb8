"""Scheduled messages written by hand, as streamq never writes them: under an ID that is
not UTF-8 (any bytes are a sorted-set member)."""

from __future__ import annotations

import redis

from streamq import Publisher
from streamq.wire.keys import Keys

NOT_UTF8_ID = b"\xff\xfe-report"
SHOWN_ID = "\\xff\\xfe-report"  # how listings show it: the bytes escaped


def schedule_under_an_id_not_utf8(url: str, r: redis.Redis, stream: str) -> None:
    """A ``report`` message due in an hour, waiting in ``stream``'s schedule under
    :data:`NOT_UTF8_ID`: published, then moved to that ID with redis-py directly."""
    keys = Keys(stream)
    with Publisher(url, stream) as publisher:
        publisher.publish("report", {"n": 1}, delay=3600, schedule_id="by-hand")
    payload, due = r.hget(keys.scheduled_payloads, "by-hand"), r.zscore(keys.scheduled, "by-hand")
    assert payload is not None and due is not None
    r.zadd(keys.scheduled, {NOT_UTF8_ID: due})
    r.hset(keys.scheduled_payloads, NOT_UTF8_ID, payload)
    r.zrem(keys.scheduled, "by-hand")
    r.hdel(keys.scheduled_payloads, "by-hand")
