"""Forwarding the outbox: on a cluster, the outputs a handler staged for a stream on another
slot were written with its entry's ack to the source stream's outbox
(:mod:`streamq.wire.outputs`); every consumer of the group moves them on to their targets.

A consumer forwards its streams' outboxes at once after it wrote to one, and looks at them
every :data:`FORWARD_INTERVAL` seconds otherwise: what a consumer that died left there is
forwarded by the others. Each output goes to its target through one script on the target's
slot that adds it only if its name (source stream, entry ID, output index) is not in the
target's dedupe set (one script call adds a page's outputs to one target), and is then deleted
from the outbox; a forwarder that dies in between,
or two that forward the same entry at once, add nothing twice. One forwarder forwards an
outbox in its order, so the outputs of one outbox reach each target in the order written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..wire import outputs as wire
from ..wire import resp
from ..wire.damage import set_aside
from ..wire.keys import Keys
from ..wire.records import DamagedRecord
from .stats import Stats

log = logging.getLogger(__name__)

FORWARD_INTERVAL = 1.0  # how often each consumer looks at the outboxes of its streams
FORWARD_PAGE = 500  # outbox entries read at a time
FORWARD_RETRY_BACKOFF = 1.0


class Forwarder:
    """Forwards the outboxes of ``streams`` (a consumer's, or an ordered topic's)."""

    def __init__(
        self,
        client_for: Callable[[str], aioredis.Redis],
        streams: Sequence[str],
        stats: Stats,
    ) -> None:
        self._client_for, self._streams, self._stats = client_for, tuple(streams), stats
        self._wakeup = anyio.Event()

    def wake(self) -> None:
        """Something was written to an outbox here: forward it now."""
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(FORWARD_INTERVAL):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()
            try:
                for stream in self._streams:
                    await self.forward(stream)
            except RedisFailure as e:
                log.warning("forwarding outputs failed, retrying in %.1fs: %s",
                            FORWARD_RETRY_BACKOFF, e)  # fmt: skip
                await anyio.sleep(FORWARD_RETRY_BACKOFF)

    async def forward(self, stream: str) -> int:
        """Forward every entry of ``stream``'s outbox; return how many were added."""
        client, outbox = self._client_for(stream), Keys(stream).outbox
        start, added = "-", 0
        while True:
            rows = await client.xrange(outbox, start, "+", count=FORWARD_PAGE)
            if rows:
                added += await self._forward_page(client, outbox, rows)
            if len(rows) < FORWARD_PAGE:
                return added
            start = "(" + _text(rows[-1][0])

    async def _forward_page(
        self, client: aioredis.Redis, outbox: str, rows: list[tuple[Any, dict[bytes, bytes]]]
    ) -> int:
        """Forward a page of the outbox: per target, its outputs' scripts in one write, in
        the outbox's order; then one XDEL of every entry forwarded (a damaged one stays)."""
        by_target: dict[str, list[tuple[str, list[bytes | str]]]] = {}
        forwarded: list[Any] = []
        for entry_id, fields in rows:
            found = _parsed(outbox, entry_id, fields)
            if isinstance(found, DamagedRecord):
                set_aside(found, "left in the outbox, not forwarded")
                continue
            target, name, rest = found
            by_target.setdefault(target, []).append((name, rest))
            forwarded.append(entry_id)
        added = 0
        for target, outputs in by_target.items():
            added += await self._forward_to(target, outputs)
        if forwarded:
            await client.xdel(outbox, *forwarded)
        self._stats.forwarded += added
        return added

    async def _forward_to(self, target: str, outputs: list[tuple[str, list[bytes | str]]]) -> int:
        """Add ``outputs`` (name, fields) to ``target`` unless already added, in their
        order, in one script call (at most :data:`FORWARD_PAGE` of them); how many were
        added."""
        keys = [target, Keys(target).forwarded]
        args = [str(wire.DEDUPE_WINDOW_MS), *wire.forward_args(outputs)]
        added = await resp.run_script(self._client_for(target), wire.FORWARD, keys, args, target)
        return int(added)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parsed(
    outbox: str, entry_id: Any, fields: dict[bytes, bytes]
) -> tuple[str, str, list[bytes | str]] | DamagedRecord:
    """An outbox entry's target, its output's name and the output's fields; a damaged
    record when it does not start with the four fields streamq writes."""
    items = list(fields.items())
    head = items[: len(wire.OUTBOX_FIELDS)]
    if [name for name, _ in head] != list(wire.OUTBOX_FIELDS) or len(items) < 6:
        found = ", ".join(_text(name) for name, _ in items[:6])[:200]
        expected = "fields target, source, entry, index, then the output's"
        return DamagedRecord("outbox", outbox, _text(entry_id), expected, found)
    target, source, entry, index = (value.decode("utf-8", "replace") for _, value in head)
    rest: list[bytes | str] = [v for pair in items[len(head) :] for v in pair]
    return target, wire.output_name(source, entry, index), rest
