"""Reading entries with their values cut on the server (streamq.wire.excerpts), and dead
letters listed that way: prefixes with full sizes, parts of one field, a stream's summary
without its first and last entries' values."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from streamq.errors import StreamNotFoundError
from streamq.topic.deadletter import DeadLetters
from streamq.wire.excerpts import field_part, range_excerpts, stream_summary
from streamq.wire.keys import Keys

pytestmark = pytest.mark.anyio


async def test_values_are_cut_on_the_server_with_their_full_sizes(
    client: aioredis.Redis, stream: str
) -> None:
    small = await client.xadd(stream, {"type": "job", "data": "x"})
    big = await client.xadd(stream, {"type": "job", "data": "é" * 100, "meta": b"\xff" * 9})
    rows = await range_excerpts(client, stream, "-", "+", 5, 11)
    assert [r.id for r in rows] == [small, big]
    assert rows[0].fields == {b"type": b"job", b"data": b"x"} and rows[0].sizes == {}
    assert rows[1].fields[b"data"] == "é".encode() * 5 + b"\xc3"  # cut inside a character
    assert rows[1].sizes == {b"data": 200}  # 9 bytes of meta are not more than 11
    after = await range_excerpts(client, stream, "(" + small.decode(), "+", 1, 11)
    assert [r.id for r in after] == [big]
    nothing = Keys(stream).dead_letters  # no such key (in the slot of the stream)
    assert await range_excerpts(client, nothing, "-", "+", 5, 11) == []


async def test_a_field_is_read_in_parts(client: aioredis.Redis, stream: str) -> None:
    entry_id = (await client.xadd(stream, {"type": "job", "data": "0123456789"})).decode()
    assert await field_part(client, stream, entry_id, "data", 0, 4) == (b"0123", 10)
    assert await field_part(client, stream, entry_id, "data", 8, 4) == (b"89", 10)
    assert await field_part(client, stream, entry_id, "meta", 0, 4) is None
    assert await field_part(client, stream, "1-1", "data", 0, 4) is None


async def test_stream_summary_leaves_out_entry_values(client: aioredis.Redis, stream: str) -> None:
    with pytest.raises(StreamNotFoundError):
        await stream_summary(client, stream)
    first = (await client.xadd(stream, {"data": "a" * 1000})).decode()
    last = (await client.xadd(stream, {"data": "b" * 1000})).decode()
    summary = await stream_summary(client, stream)
    assert (summary.length, summary.first_id, summary.last_id) == (2, first, last)
    assert summary.last_generated_id == last and summary.entries_added == 2
    await client.xtrim(stream, maxlen=0)
    empty = await stream_summary(client, stream)
    assert (empty.length, empty.first_id, empty.last_id) == (0, None, last)


async def test_dead_letters_listed_with_a_limit_say_what_was_cut(
    client: aioredis.Redis, stream: str
) -> None:
    key = Keys(stream).dead_letters
    await client.xadd(key, {"type": "job", "data": "ü" * 30, "error": "e" * 50, "attempts": "3"})
    (letter,) = await DeadLetters(client, stream).list(limit=21)
    assert letter.data == "ü" * 10 and letter.error == "e" * 21  # no half character shown
    assert letter.cut == {"data": 60, "error": 50} and letter.attempts == 3
    (whole,) = await DeadLetters(client, stream).list()
    assert whole.data == "ü" * 30 and whole.cut == {}
