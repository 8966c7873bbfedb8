"""The Redis boundary: every redis-py error leaves it as streamq's, typed by what the reply
says (matched in one place, wire/client.py), against the real server."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis import exceptions as rx

from streamq import (
    GroupExistsError,
    GroupNotFoundError,
    ServerUnavailableError,
    StreamNotFoundError,
    UnknownCommandError,
)
from streamq.topic.admin import ensure_group, seek
from streamq.topic.cleanup import has_xdelex
from streamq.wire.client import translated
from tests.conftest import QueueFactory

pytestmark = pytest.mark.anyio


async def test_replies_become_typed_errors(client: aioredis.Redis, stream: str) -> None:
    with pytest.raises(StreamNotFoundError), translated(stream, "g"):
        await client.execute_command("XGROUP", "SETID", stream, "g", "0")  # no key yet
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    with pytest.raises(GroupExistsError), translated(stream, "g"):
        await client.xgroup_create(stream, "g", id="0", mkstream=True)
    with pytest.raises(GroupNotFoundError), translated(stream, "h"):
        await client.xgroup_setid(stream, "h", "0")
    with pytest.raises(StreamNotFoundError), translated(stream + "-x"):
        await client.xinfo_groups(stream + "-x")


async def test_an_unknown_command_is_typed(client: aioredis.Redis, stream: str) -> None:
    with pytest.raises(UnknownCommandError), translated(stream):
        await client.execute_command("NO-SUCH-COMMAND", stream)
    # the cleanup probe relies on it: it answers, whatever the server is
    assert isinstance(await has_xdelex(client, stream), bool)


async def test_ensure_group_tells_an_existing_group(client: aioredis.Redis, stream: str) -> None:
    assert await ensure_group(client, stream, "g", "0") is True
    assert await ensure_group(client, stream, "g", "0") is False


async def test_seek_on_a_deleted_stream_says_the_group_is_missing(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    """Was a bare RedisFailure ("The XGROUP subcommand requires the key to exist")."""
    mq = make_queue()
    async with mq:
        await client.delete(mq.stream)
        with pytest.raises(GroupNotFoundError, match="cannot seek"):
            await seek(client, mq.stream, "g", "0")


def test_an_error_translated_twice_keeps_its_first_translation() -> None:
    """Nested boundaries (a helper that translates, called under another translated())
    pass streamq's error on as it is: it was re-wrapped as "cannot reach the server:
    server not ready: ..." before."""
    outer, inner = translated("s", "g"), translated("s", "g")
    with pytest.raises(ServerUnavailableError) as caught, outer, inner:
        raise rx.ResponseError("LOADING Redis is loading the dataset in memory")
    assert isinstance(caught.value.__cause__, rx.ResponseError)
    assert str(caught.value) == "server not ready: LOADING Redis is loading the dataset in memory"


@pytest.mark.parametrize(
    "error", [rx.ConnectionError("reset"), rx.TimeoutError("slow"), ConnectionResetError("rst")]
)
def test_connection_failures_are_server_unavailable(error: Exception) -> None:
    with pytest.raises(ServerUnavailableError, match="cannot reach the server"), translated("s"):
        raise error
