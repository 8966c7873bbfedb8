"""Downloading one field of a dead letter whole (``/topic/dead-letters/field``).

The dead-letter page shows each field cut to a prefix and links the fields it cut here.
The field is sent in parts of :data:`PART_BYTES` read on the server
(:func:`~streamq.wire.excerpts.field_part`), so a download of any size holds one part in
the dashboard at a time; it holds a read slot (:mod:`.limits`) until it ends. If the letter
is removed meanwhile (replayed, purged), the download ends short of its Content-Length,
which a client reports as incomplete.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

import redis.asyncio as aioredis
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..wire.excerpts import field_part
from .limits import slots_of
from .pages import stream_param, view_of

PART_BYTES = 4 * 1024 * 1024  # each part makes the server read the whole letter: not too many
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


async def dead_letter_field(request: Request) -> Response:
    """The field ``field`` of the dead letter ``id`` of the topic ``stream``, as a file."""
    slots = slots_of(request)
    await slots.take()
    try:
        letter_id, name = _param(request, "id"), _param(request, "field")
        view = await view_of(request, stream_param(request))
        client, key, raw_id = view.dead_letter_at(letter_id)
        first = await field_part(client, key, raw_id, name, 0, PART_BYTES)
        if first is None:
            raise HTTPException(404, f"no field {name!r} in a dead letter {letter_id} of {key!r}")
    except BaseException:
        slots.give_back()
        raise
    part, size = first
    filename = _UNSAFE.sub("_", f"dead-letter-{letter_id}-{name}") + ".bin"
    return _HeldStreamingResponse(
        _parts(client, key, raw_id, name, part, size),
        release=slots.give_back,
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
    )


def _param(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if not value:
        raise HTTPException(400, f"no {name!r} given")
    return value


async def _parts(
    client: aioredis.Redis, key: str, entry_id: str, name: str, first: bytes, size: int
) -> AsyncIterator[bytes]:
    yield first
    offset = len(first)
    while offset < size:
        got = await field_part(client, key, entry_id, name, offset, PART_BYTES)
        if got is None or not got[0]:
            return  # the letter is gone: the response ends short of its Content-Length
        yield got[0]
        offset += len(got[0])


class _HeldStreamingResponse(StreamingResponse):
    """A streaming response that calls ``release`` when it ends, however it ends (sent,
    the client gone, an error)."""

    def __init__(self, *args: object, release: Callable[[], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
