"""Hand-packed RESP for the hot commands (XREADGROUP, XACK with many IDs, pipelined XADD).

redis-py packs every argument through generic code; for a pipeline of 1,000 XADDs or an
XACK of 100 IDs that packing is most of the client's CPU. Packing here is one join. The
replies are read with redis-py's own parser (hiredis when installed) on the same
connection, but without redis-py's per-command reply callbacks: an XREADGROUP reply stays
the parser's nested lists instead of becoming one dict per entry that we would rebuild.

Commands answered ``ASK`` (their slot is being migrated, :mod:`streamq.wire.asking`) are
sent once more to the node named, each after ``ASKING`` (:func:`follow_asks`). What a
write raises, and an error reply, leave as streamq's errors (:mod:`streamq.wire.translate`).
Every reply is read through :mod:`streamq.wire.reading`: one that comes later than its
timeout closes its connection (kept, the late reply would answer the next command).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis
import redis.exceptions as rx

from .asking import asked_writes, put_answers
from .reading import read_reply, read_reply_sync
from .translate import RECONFIGURING, translate


def bulk(value: bytes | str) -> bytes:
    raw = value if isinstance(value, bytes) else value.encode()
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def pack(*args: bytes | str) -> bytes:
    return b"*%d\r\n%s" % (len(args), b"".join(bulk(a) for a in args))


def pack_command(args: Iterable[bytes | str | int]) -> bytes:
    """One command of mixed arguments (numbers as their decimal text)."""
    return pack(*(a if isinstance(a, bytes | str) else str(a) for a in args))


def pack_xadds(
    stream: str,
    entries: Iterable[Mapping[bytes | str, bytes | str]],
    options: tuple[str, ...] = (),
    common: tuple[bytes | str, ...] = (),
) -> tuple[bytes, int]:
    """``XADD stream [options] * field value ... [common]`` for each entry (``common``:
    field-value pairs every entry ends with, packed once, as ``publish`` writes its marker
    last); returns (bytes, command count)."""
    head = b"".join(bulk(word) for word in ("XADD", stream, *options, "*"))
    tail = b"".join(bulk(word) for word in common)
    parts, count, fixed, before = [], 0, 3 + len(options) + len(common), b""
    for fields in entries:  # an entry's tail goes with the next one's count: no more calls
        parts.append(before + b"*%d\r\n" % (fixed + 2 * len(fields)))
        parts.append(head)
        parts.extend(bulk(k) + bulk(v) for k, v in fields.items())
        count, before = count + 1, tail
    parts.append(before)
    return b"".join(parts), count


def pack_xack(stream: str, group: str, ids: list[str]) -> bytes:
    """``XACK stream group id ...``; IDs are ASCII, so their text length is their byte length."""
    body = "".join([f"${len(i)}\r\n{i}\r\n" for i in ids]).encode()
    return b"*%d\r\n%s%s%s%s" % (3 + len(ids), bulk(b"XACK"), bulk(stream), bulk(group), body)


def pack_xreadgroup(
    group: str, consumer: str, stream: str, start: str, count: int, block_ms: int | None
) -> bytes:
    """``XREADGROUP GROUP g c COUNT n [BLOCK ms] STREAMS stream start`` (no BLOCK: None)."""
    block = () if block_ms is None else ("BLOCK", str(block_ms))
    return pack(
        "XREADGROUP", "GROUP", group, consumer, "COUNT", str(count), *block,
        "STREAMS", stream, start,
    )  # fmt: skip


async def execute(
    client: aioredis.Redis,
    packed: bytes,
    replies: int,
    *,
    raise_errors: bool = True,
    held: float = 0.0,
) -> list[Any]:
    """Send ``packed`` on one pooled connection and read ``replies`` replies.

    An error reply raises (streamq's error for it) after all replies were read, so the
    connection stays in step, or with ``raise_errors=False`` is returned in its place
    (redis-py's exception object); any other failure drops the connection.
    ``held``: how long the server holds a reply by design (``WAIT``), on top of the
    connection's ``socket_timeout`` (:func:`~streamq.wire.reading.reply_timeout`).
    """
    pool, stream = client.connection_pool, _stream_of(client)
    try:
        results = await _exchange_on(pool, packed, replies, held)
        results = await follow_asks(pool, packed, results)
    except (redis.RedisError, OSError) as e:
        raise translate(e, stream) from e
    if raise_errors:
        _raise_first_error(results, stream)
    return results


_SHAS: dict[str, str] = {}  # a script's text -> its SHA1 (each hashed once)


def script_sha(script: str) -> str:
    """The SHA1 of ``script``, as ``EVALSHA`` names it."""
    sha = _SHAS.get(script)
    if sha is None:
        sha = _SHAS[script] = hashlib.sha1(script.encode()).hexdigest()
    return sha


async def run_script(
    client: aioredis.Redis,
    script: str,
    keys: list[str],
    args: Iterable[bytes | str | int],
    stream: str,
) -> Any:
    """Run ``script`` on one pooled connection, hand-packed (``EVALSHA``; ``EVAL`` when the
    server lacks it): a third of the CPU of redis-py's ``Script`` call. Streamq's error for
    an error reply (``stream``: the stream it concerns)."""
    tail = [str(len(keys)), *keys, *(a if isinstance(a, bytes | str) else str(a) for a in args)]
    (reply,) = await execute(
        client, pack("EVALSHA", script_sha(script), *tail), 1, raise_errors=False
    )
    if isinstance(reply, rx.NoScriptError):
        (reply,) = await execute(client, pack("EVAL", script, *tail), 1, raise_errors=False)
    if isinstance(reply, rx.ResponseError):
        raise translate(reply, stream) from reply
    return reply


class HeldConnection:
    """One pooled connection kept checked out between commands (:class:`OwnConnection`,
    the publishing lanes' :class:`~streamq.publish.coalesce.KeptConnection`): dropped and given
    back after a failure, given back after a reply saying that the cluster moved the key's
    slot; the next command takes one from the pool again, which finds the master (a
    cluster's slot owner, Sentinel's master)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool, self._stream = client.connection_pool, _stream_of(client)
        self._connection: Any = None

    async def _discard(self) -> None:
        """After a failure: the connection's replies may be out of step."""
        await _drop(self._connection)
        await self.release()

    async def _redirected(self, packed: bytes, results: list[Any]) -> list[Any]:
        """``results`` of ``packed``, some saying that the cluster is reconfiguring:
        commands answered ASK are sent to the node named at once (the connection is kept:
        the slot is still its node's); after a MOVED (TRYAGAIN...) it is given back."""
        results = await follow_asks(self._pool, packed, results)
        if any(isinstance(result, RECONFIGURING) for result in results):
            await self.release()
        return results

    async def release(self) -> None:
        """Give the connection back to the pool (when its owner is done)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with anyio.CancelScope(shield=True):
                await self._pool.release(connection)


class OwnConnection(HeldConnection):
    """One pooled connection kept by one task for its whole life (the read loop).

    Checking a connection out of redis-py's pool and back costs two lock round trips and
    a readiness probe per command; a task that sends a command every few hundred
    microseconds keeps its connection instead.

    ``held``: how long the server holds a reply by design (a blocking read's ``BLOCK``),
    on top of the connection's ``socket_timeout``
    (:func:`~streamq.wire.reading.reply_timeout`).
    """

    def __init__(self, client: aioredis.Redis, *, held: float = 0.0) -> None:
        super().__init__(client)
        self._held = held

    async def execute(
        self, packed: bytes, replies: int, *, raise_errors: bool = True, held: float | None = None
    ) -> list[Any]:
        """Like :func:`execute`, on this task's own connection; ``held``: how long the
        server holds these replies by design, when not the connection's own."""
        try:
            results = await self._exchange(packed, replies, self._held if held is None else held)
        except (redis.RedisError, OSError) as e:
            raise translate(e, self._stream) from e
        if raise_errors:
            _raise_first_error(results, self._stream)
        return results

    async def _exchange(self, packed: bytes, replies: int, held: float) -> list[Any]:
        if self._connection is None:
            self._connection = await self._pool.get_connection()
        try:
            await self._connection.send_packed_command([packed])
            results = await read_replies(self._connection, replies, held)
        except BaseException:
            await self._discard()
            raise
        if any(isinstance(result, RECONFIGURING) for result in results):
            results = await self._redirected(packed, results)
        return results


async def follow_asks(pool: Any, packed: bytes, results: list[Any]) -> list[Any]:
    """``results`` of ``packed`` (sent through ``pool``) with each ASK reply replaced by
    the reply of its command sent to the node named, after ``ASKING`` (one write per node)."""
    for target, write, positions in asked_writes(pool, packed, results):
        put_answers(results, positions, await _exchange_on(target, write, 2 * len(positions)))
    return results


async def _exchange_on(pool: Any, packed: bytes, replies: int, held: float = 0.0) -> list[Any]:
    """Send ``packed`` on a connection taken from ``pool`` for it, read ``replies`` replies."""
    connection = await pool.get_connection()
    try:
        await connection.send_packed_command([packed])
        return await read_replies(connection, replies, held)
    except BaseException:
        await _drop(connection)
        raise
    finally:
        await pool.release(connection)


async def read_replies(connection: Any, replies: int, held: float = 0.0) -> list[Any]:
    """``replies`` replies read from ``connection``, error replies as exception objects;
    a reply later than its timeout closes the connection and raises
    (:func:`~streamq.wire.reading.read_reply`)."""
    results = []
    for _ in range(replies):
        try:
            results.append(await read_reply(connection, held))
        except redis.ResponseError as e:
            results.append(e)
    return results


async def _drop(connection: Any) -> None:
    """Close a connection whose replies may be out of step (failure or cancelled read)."""
    with anyio.CancelScope(shield=True):
        await connection.disconnect()


def execute_sync(
    client: redis.Redis, packed: bytes, replies: int, *, held: float = 0.0
) -> list[Any]:
    """The same for a synchronous client (the Publisher, Spark executors)."""
    pool, stream = client.connection_pool, _stream_of(client)
    try:
        exchanged = _exchange_sync(pool, packed, replies, held)
        results = follow_asks_sync(pool, packed, exchanged)
    except (redis.RedisError, OSError) as e:
        raise translate(e, stream) from e
    _raise_first_error(results, stream)
    return results


def follow_asks_sync(pool: Any, packed: bytes, results: list[Any]) -> list[Any]:
    """The blocking twin of :func:`follow_asks`."""
    for target, write, positions in asked_writes(pool, packed, results):
        put_answers(results, positions, _exchange_sync(target, write, 2 * len(positions)))
    return results


def _exchange_sync(pool: Any, packed: bytes, replies: int, held: float = 0.0) -> list[Any]:
    connection = pool.get_connection()
    try:
        connection.send_packed_command([packed])
        return read_replies_sync(connection, replies, held)
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def read_replies_sync(connection: Any, replies: int, held: float = 0.0) -> list[Any]:
    """The blocking twin of :func:`read_replies`."""
    results = []
    for _ in range(replies):
        try:
            results.append(read_reply_sync(connection, held))
        except redis.ResponseError as e:
            results.append(e)
    return results


def _raise_first_error(results: list[Any], stream: str) -> None:
    for result in results:
        if isinstance(result, redis.ResponseError):
            raise translate(result, stream) from result


def _stream_of(client: Any) -> str:
    """The key whose slot ``client`` serves (streamq's clients), to name in errors."""
    return getattr(client, "stream", "")
