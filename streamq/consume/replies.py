"""The replies a consumer writes to the requests it handles (``mq.request``; the wire side
is :mod:`streamq.wire.replying`).

A handled request's reply is its handler's return value; a request dead-lettered (failed
past its delivery limit, rejected, a bad payload) is answered with the reason, which
``mq.request`` raises as :class:`~streamq.RemoteError`. A consumer built by a queue writes a
handled request's reply as one more output of the entry (``staged``): with its ack, in the
acker's next flush, one script for every entry of the flush (fenced in ordered mode), so a
reply exists exactly when the request is acknowledged, and concurrent requests share a
round trip. Without staging (a consumer built on its own), in shared mode the reply and the
ack are one script per request; in ordered mode the reply is written first and the fenced
ack follows (a crash in between runs the handler again, whose second reply the requester
ignores).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from ..message import RawEntry
from ..payload.keyring import Keyring
from ..payload.replies import reply_key, sealed_reply
from ..wire import resp
from ..wire.keys import Keys
from ..wire.replying import REPLY, REPLY_MAXLEN, REPLY_TO, REPLY_TTL_MS, REQUEST, reply_fields
from .outputs import Output


class Replier:
    """Writes the replies of one stream's requests (with their ack when ``with_ack``)."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        *,
        with_ack: bool,
        staged: bool = False,
        acked: Callable[[int], None] = lambda count: None,
        keyring: Keyring | None = None,
    ) -> None:
        """``staged``: replies go with the acks as outputs (:meth:`output`);
        ``acked(n)``: n entries were acked with their replies by :meth:`handled`;
        ``keyring``: the consumer's, which encrypts the replies to encrypted requests
        (:mod:`streamq.payload.replies`)."""
        self._client, self._keyring = client, keyring
        self._keys, self._stream, self._group = Keys(stream), stream, group
        self.with_ack, self.staged, self._acked = with_ack, staged, acked

    async def handled(self, entry: RawEntry, meta: dict[str, str], result: Any) -> None:
        """The request ``entry`` was handled: its reply (and, ``with_ack``, its ack)."""
        await self._write(entry, meta, self._fields(entry, meta, result), ack=self.with_ack)
        if self.with_ack:
            self._acked(1)

    def output(self, entry: RawEntry, meta: dict[str, str], result: Any) -> Output:
        """The reply to a request handled with outputs: written with them and the ack."""
        flat = self._fields(entry, meta, result)
        fields: dict[bytes | str, bytes | str] = dict(zip(flat[::2], flat[1::2], strict=True))
        return Output(self._keys.replies(meta[REPLY_TO]), fields, str(REPLY_MAXLEN),
                      str(REPLY_TTL_MS))  # fmt: skip

    async def failed(self, entry: RawEntry, meta: dict[str, str], reason: str) -> None:
        """The request ``entry`` was dead-lettered (and acked with its letter)."""
        await self._write(entry, meta, self._fields(entry, meta, error=reason), ack=False)

    def _fields(
        self, entry: RawEntry, meta: dict[str, str], result: Any = None, error: str | None = None
    ) -> list[str | bytes]:
        """The reply's fields: encrypted with the request's key when the request was."""
        fields = reply_fields(meta[REQUEST], result, error)
        kid = reply_key(entry.fields, self._keyring)
        if kid is None or self._keyring is None:
            return list(fields)
        return sealed_reply(fields, kid, self._keyring)

    async def _write(
        self, entry: RawEntry, meta: dict[str, str], fields: list[str | bytes], *, ack: bool
    ) -> None:
        reply_key = self._keys.replies(meta[REPLY_TO])
        args: list[bytes | str | int] = [
            REPLY_TTL_MS, REPLY_MAXLEN, self._group if ack else "", entry.id, *fields
        ]  # fmt: skip
        await resp.run_script(self._client, REPLY, [reply_key, self._stream], args, self._stream)
