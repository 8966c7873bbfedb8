"""Waiting entries read again by ID (streamq/consume/flow_parking.py ``entries_by_id``):
entries read together and entries spread further apart are found, deleted ones are
named so."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from streamq.consume.flow_parking import entries_by_id

pytestmark = pytest.mark.anyio


async def test_entries_are_read_again_by_id_however_far_apart(
    client: aioredis.Redis, stream: str
) -> None:
    ids = [(await client.xadd(stream, {"n": str(n)})).decode() for n in range(50)]
    wanted = [ids[0], ids[1], ids[2], ids[30], ids[49]]  # past twice their count apart
    await client.xdel(stream, ids[2])
    found = await entries_by_id(client, stream)(list(reversed(wanted)))
    assert set(found) == set(wanted)
    assert found[ids[2]] is None, "a deleted entry was found"
    for n in (0, 1, 30, 49):
        entry = found[ids[n]]
        assert entry is not None and entry.id == ids[n] and entry.fields == {b"n": str(n).encode()}


async def test_entries_read_together_are_found_with_their_fields(
    client: aioredis.Redis, stream: str
) -> None:
    ids = [(await client.xadd(stream, {"n": str(n)})).decode() for n in range(10)]
    found = await entries_by_id(client, stream)(ids[3:8])
    assert {i: e.fields[b"n"] for i, e in found.items() if e} == {
        ids[n]: str(n).encode() for n in range(3, 8)
    }
