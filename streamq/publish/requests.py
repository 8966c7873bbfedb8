"""``mq.request(...)``: publish a request and wait for its reply (the wire side is
:mod:`streamq.wire.replying`, the consumer's :mod:`streamq.consume.replies`).

A request is published like any message, its ``meta`` naming this process (a random ID
per queue) and the request. Its reply comes on the reply stream of the partition stream
it went to. The requests of one process waiting on one reply stream share one reader: the
first waiting request reads (``XREAD BLOCK``) and hands every reply it finds to its
request; once its own reply came (or it timed out, or was cancelled) it stops, and another
waiting request takes over. So
there is no task to start or stop, and one read serves any number of waiting requests.
A reply that comes after its request timed out is read and dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import redis.asyncio as aioredis
from pydantic import TypeAdapter, ValidationError

from ..config import Duration, seconds
from ..errors import MessageFormatError, RemoteError, RequestTimeout
from ..payload.keyring import Keyring
from ..payload.replies import opened_reply
from ..payload.wire import StepFailed
from ..wire import replies as wire_replies
from ..wire import resp
from ..wire.keys import Keys
from ..wire.replying import REPLY_TO, REQUEST

READ_BLOCK_MS = 1000  # one read waits at most this long (a timeout is checked in between)

Publish = Callable[[str, Any, Mapping[str, str], Any, int | None], Awaitable[str]]


@dataclass(slots=True)
class _Waiting:
    reply: dict[bytes, bytes] | None = None
    turn: anyio.Event = field(default_factory=anyio.Event)  # a reply came, or it may read


class ReplyReader:
    """The replies on one reply stream, read by whichever waiting request leads."""

    def __init__(self, client: aioredis.Redis, key: str, waiting: dict[str, _Waiting]) -> None:
        self._client, self._key, self._waiting = client, key, waiting
        self._cursor = "0-0"  # the stream is this process's own: every reply in it is ours
        self._leader: _Waiting | None = None
        self._mine: set[str] = set()  # the requests waiting on this stream

    async def wait(self, request_id: str, me: _Waiting) -> dict[bytes, bytes]:
        self._mine.add(request_id)
        try:
            while me.reply is None:
                if self._leader is None:
                    await self._lead(me)
                else:
                    await me.turn.wait()
                    me.turn = anyio.Event()
            return me.reply
        finally:
            self._mine.discard(request_id)
            # whatever ends this wait (its reply, its timeout, a cancel), if no request
            # reads now, this one led or was handed the turn: another waiting one reads on
            if self._leader is None:
                self._pass_turn()

    async def _lead(self, me: _Waiting) -> None:
        self._leader = me
        try:
            while me.reply is None:
                await self._read()
        finally:
            self._leader = None

    def _pass_turn(self) -> None:
        """Wake one waiting request of this stream (still without its reply) to read."""
        for request_id in self._mine:
            waiting = self._waiting.get(request_id)
            if waiting is not None and waiting.reply is None:
                waiting.turn.set()
                return

    async def _read(self) -> None:
        command = resp.pack("XREAD", "COUNT", "100", "BLOCK", str(READ_BLOCK_MS), "STREAMS",
                            self._key, self._cursor)  # fmt: skip
        reply = (await resp.execute(self._client, command, 1, held=READ_BLOCK_MS / 1000))[0]
        rows = wire_replies.read_rows(reply)
        for entry in wire_replies.entries(rows) if rows else []:
            self._cursor = entry.id
            request_id = entry.fields.get(b"request", b"").decode()
            waiting = self._waiting.get(request_id)
            if waiting is not None and waiting.reply is None:
                waiting.reply = entry.fields
                waiting.turn.set()


class Requests:
    """The requests of one queue: ``request`` publishes and waits for the reply."""

    def __init__(
        self, publish: Publish, client_for: Callable[[str], aioredis.Redis],
        streams: Callable[[], tuple[str, ...]], keyring: Keyring | None = None,
    ) -> None:  # fmt: skip
        """``keyring``: the queue's, which decrypts the replies to its encrypted requests."""
        self.requester = uuid.uuid4().hex  # this process's reply streams
        self._keyring = keyring
        self._publish, self._client_for, self._streams = publish, client_for, streams
        self._waiting: dict[str, _Waiting] = {}  # request ID -> its wait, over all streams
        self._readers: dict[str, ReplyReader] = {}

    async def request(
        self,
        message_type: str,
        data: Any,
        *,
        timeout: Duration,  # noqa: ASYNC109  # the request's own deadline
        reply_model: Any,
        key: Any,
        meta: Mapping[str, str] | None,
        priority: int | None = None,
    ) -> Any:
        limit = seconds(timeout, "timeout", allow_zero=False)
        request_id = uuid.uuid4().hex
        me = self._waiting[request_id] = _Waiting()
        try:
            with anyio.move_on_after(limit) as scope:
                fields = {**(meta or {}), REPLY_TO: self.requester, REQUEST: request_id}
                entry_id = await self._publish(message_type, data, fields, key, priority)
                reply = await self._reader(entry_id).wait(request_id, me)
        finally:
            del self._waiting[request_id]
        if scope.cancelled_caught:
            raise RequestTimeout(
                f"no reply to the {message_type!r} request within {limit:g} s "
                "(is a consumer of its group running?)"
            )
        reply = self._opened(message_type, reply)
        if b"error" in reply:
            raise RemoteError(reply[b"error"].decode("utf-8", "replace"))
        return _validated(message_type, reply.get(b"data", b"null"), reply_model)

    def _opened(self, message_type: str, reply: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """The reply decrypted; MessageFormatError naming the step that failed."""
        try:
            return opened_reply(reply, self._keyring)
        except StepFailed as e:
            raise MessageFormatError(
                f"the reply to the {message_type!r} request cannot be read: {e.step}: {e}"
            ) from None

    def _reader(self, entry_id: str) -> ReplyReader:
        """The reader of the reply stream of the partition ``entry_id`` went to."""
        streams = self._streams()
        partition, _, _ = entry_id.rpartition(":")
        stream = streams[int(partition)] if partition else streams[0]
        reader = self._readers.get(stream)
        if reader is None:
            key = Keys(stream).replies(self.requester)
            reader = self._readers[stream] = ReplyReader(
                self._client_for(stream), key, self._waiting
            )
        return reader


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}  # reply_model -> its adapter (made once each)
MAX_ADAPTERS = 256


def _adapter(reply_model: Any) -> TypeAdapter[Any]:
    """The validator of ``reply_model`` (``Any`` for None), kept: making one costs more than
    a request's round trip."""
    model = reply_model if reply_model is not None else Any
    try:
        return _ADAPTERS[model]
    except KeyError:
        adapter = TypeAdapter(model)
        if len(_ADAPTERS) < MAX_ADAPTERS:
            _ADAPTERS[model] = adapter
        return adapter
    except TypeError:  # an unhashable annotation: not kept
        return TypeAdapter(model)


def _validated(message_type: str, raw: bytes, reply_model: Any) -> Any:
    """The reply's JSON as ``reply_model`` (as it is without one). A reply it refuses is a
    MessageFormatError, so that a caller catching StreamqError catches it too."""
    try:
        return _adapter(reply_model).validate_json(raw)
    except ValidationError as e:
        model = reply_model.__name__ if isinstance(reply_model, type) else repr(reply_model)
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'reply'}: {error['msg']}"
            for error in e.errors()[:3]
        )
        more = f" (and {e.error_count() - 3} more)" if e.error_count() > 3 else ""
        raise MessageFormatError(
            f"the reply to the {message_type!r} request does not fit reply_model={model}: "
            f"{problems}{more}"
        ) from e
