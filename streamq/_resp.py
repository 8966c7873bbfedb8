"""Hand-packed RESP for the hot bulk commands (XACK with many IDs, pipelined XADD).

redis-py packs every argument through generic code; for a pipeline of 1,000 XADDs or an
XACK of 100 IDs that packing is most of the client's CPU. Packing here is one join, and
the replies are read back with redis-py's own parser on the same connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import redis
import redis.asyncio as aioredis


def bulk(value: bytes | str) -> bytes:
    raw = value if isinstance(value, bytes) else value.encode()
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def pack(*args: bytes | str) -> bytes:
    return b"*%d\r\n%s" % (len(args), b"".join(bulk(a) for a in args))


def pack_xadds(
    stream: str, entries: Iterable[Mapping[bytes | str, bytes | str]]
) -> tuple[bytes, int]:
    """``XADD stream * field value ...`` for each entry; returns (bytes, command count)."""
    head = bulk(b"XADD") + bulk(stream) + bulk(b"*")
    parts, count = [], 0
    for fields in entries:
        parts.append(b"*%d\r\n" % (3 + 2 * len(fields)))
        parts.append(head)
        parts.extend(bulk(k) + bulk(v) for k, v in fields.items())
        count += 1
    return b"".join(parts), count


async def execute(client: aioredis.Redis, packed: bytes, replies: int) -> list[Any]:
    """Send ``packed`` on one pooled connection and read ``replies`` replies.

    An error reply raises (redis.ResponseError) after all replies were read, so the
    connection stays in step; any other failure drops the connection.
    """
    pool = client.connection_pool
    connection = await pool.get_connection()
    try:
        await connection.send_packed_command([packed])
        results = []
        for _ in range(replies):
            try:
                results.append(await connection.read_response())
            except redis.ResponseError as e:
                results.append(e)
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)
    _raise_first_error(results)
    return results


def execute_sync(client: redis.Redis, packed: bytes, replies: int) -> list[Any]:
    """The same for a synchronous client (Spark executors)."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command([packed])
        results = []
        for _ in range(replies):
            try:
                results.append(connection.read_response())
            except redis.ResponseError as e:
                results.append(e)
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    _raise_first_error(results)
    return results


def _raise_first_error(results: list[Any]) -> None:
    for result in results:
        if isinstance(result, redis.ResponseError):
            raise result
