"""``streamq tail``: follow a stream, or every partition of a partitioned topic, without a
consumer group (``XREAD``), one JSON object a line.

Each stream is read on its own (one key per read: partitions may live on different cluster
slots), in ID order within it. A partitioned topic's entries are printed with their
partition (``"3:<ms>-<seq>"``, as ``publish`` returns them), the partitions read in turn
without blocking and a short pause when none had anything, so following many partitions
holds no connection per partition. ``--from ID`` starts every partition after that ID.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from ..config import StartFrom
from ..consume.positions import start_position
from ..payload.keyring import Keyring
from ..queue import MessageQueue
from ..wire.replies import stream_rows
from .render import tail_line

READ_COUNT = 100
BLOCK_MS = 500  # a plain stream: one blocking read at a time
IDLE_PAUSE = 0.2  # a partitioned topic: after a round of reads that found nothing


async def tail(
    mq: MessageQueue,
    start: str,
    *,
    count: int,
    seconds: float,
    still_there: Callable[[MessageQueue], Awaitable[None]],
    keyring: Keyring | None = None,
) -> None:
    """Print entries after ``start`` (``$``: new ones only) until ``count`` were printed
    or ``seconds`` passed (0: no limit). ``still_there`` raises once the topic is gone.
    ``keyring``: decrypts encrypted payloads (without it they are shown as such)."""
    begin = StartFrom.LATEST if start == "$" else StartFrom(start)
    cursors = {s: await start_position(mq.client_for(s), s, begin) for s in mq.streams}
    partitioned = len(mq.streams) > 1
    block = None if partitioned else BLOCK_MS
    shown = 0
    deadline = time.monotonic() + seconds if seconds else None
    while deadline is None or time.monotonic() < deadline:
        found = 0
        for index, stream in enumerate(mq.streams):
            reply = await mq.client_for(stream).xread(
                {stream: cursors[stream]}, count=READ_COUNT, block=block
            )
            for entry_id, fields in stream_rows(reply):
                cursors[stream] = entry_id.decode()
                shown_id = f"{index}:{cursors[stream]}" if partitioned else cursors[stream]
                print(tail_line(shown_id, fields, keyring), flush=True)
                shown, found = shown + 1, found + 1
                if count and shown >= count:
                    return
        if not found:
            await still_there(mq)  # deleted while we follow it: say so, exit 1
            if partitioned:
                await anyio.sleep(IDLE_PAUSE)
