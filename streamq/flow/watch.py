"""A running consumer's view of its group's pause record (:mod:`streamq.flow.pause`).

:class:`PauseWatch` reads the record when it starts, whenever a notice on the topic's
flow channel says it changed, and every :data:`POLL_INTERVAL` in any case (pub/sub may
lose a notice: a pause still reaches every consumer within a second). Asking whether a
type is paused costs no round trip. While the server cannot be reached it keeps what it
read last (logged once per outage): an outage neither pauses nor resumes anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc
import redis.asyncio as aioredis

from .._backoff import Backoff
from ..errors import RedisFailure, ServerUnavailableError
from ..wire.keys import Keys
from ..wire.liveness import Liveness
from ..wire.translate import translated
from .pause import WHOLE_GROUP, notice_group, paused
from .waiting import WaitingReporter

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5  # seconds between two reads of the record without a notice
LISTENER_BACKOFF = 0.5  # the flow channel's first reconnection delay, doubling up to:
MAX_LISTENER_BACKOFF = 10.0


class PauseWatch:
    """What is paused in ``group`` of the topic ``stream`` (``client`` serves the topic's
    own keys), kept current while :meth:`run` runs. ``on_change`` is called after each
    change of what is paused (to wake entries waiting for a resume, say)."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        *,
        interval: float = POLL_INTERVAL,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._client, self._stream, self._group = client, stream, group
        self._interval, self._on_change = interval, on_change
        # what is paused: ``*`` (the whole group) and type names (an attribute, not a
        # property: a consumer looks at it for every entry it hands a handler)
        self.targets: frozenset[str] = frozenset()
        self._changed = anyio.Event()  # set (and replaced) at each change
        self._poke = anyio.Event()  # a notice arrived: read now
        self._lost = False  # the server is out of reach (logged once per outage)
        # a running consumer's: its waiting counts ride on the reads (see .waiting)
        self.reporter: WaitingReporter | None = None

    def paused(self, type_name: str) -> bool:
        """Whether entries of ``type_name`` wait (the group or the type is paused)."""
        targets = self.targets
        return bool(targets) and (WHOLE_GROUP in targets or type_name in targets)

    async def wait_unpaused(self, type_name: str) -> None:
        """Return once entries of ``type_name`` may run (at once if they may now)."""
        while self.paused(type_name):
            await self._changed.wait()

    async def refresh(self) -> None:
        """Read the record now (one round trip, carrying the consumer's waiting report when
        one is due); streamq's errors as any command."""
        reporter = self.reporter
        report = None if reporter is None else reporter.due()
        records = await paused(self._client, self._stream, self._group, report=report)
        if reporter is not None and report is not None:
            reporter.written(report)
        found = frozenset(r.target for r in records)
        if found != self.targets:
            self.targets = found
            changed, self._changed = self._changed, anyio.Event()
            changed.set()
            if self._on_change is not None:
                self._on_change()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep the view current until cancelled; ready once the record was read (or
        could not be: the reading goes on). Once cancelled, the consumer's waiting report
        is removed."""
        try:
            await self._refresh_or_log()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._listen)
                task_status.started()
                while True:
                    with anyio.move_on_after(self._interval):
                        await self._poke.wait()
                    self._poke = anyio.Event()
                    await self._refresh_or_log()
        finally:
            if self.reporter is not None:
                with anyio.CancelScope(shield=True):
                    await self.reporter.withdraw(self._client)

    async def _refresh_or_log(self) -> None:
        try:
            await self.refresh()
        except RedisFailure as e:
            if not self._lost:
                self._lost = True
                log.warning(
                    "cannot read the pause record of group %r of %r, keeping what was read "
                    "last (%s): %s", self._group, self._stream, _described(self.targets), e,
                )  # fmt: skip
            return
        if self._lost:
            self._lost = False
            log.info("the pause record of group %r of %r is read again", self._group, self._stream)

    async def _listen(self) -> None:
        """Follow the flow channel: a notice for this group makes :meth:`run` read now."""
        backoff = Backoff(LISTENER_BACKOFF, MAX_LISTENER_BACKOFF)
        channel = Keys(self._stream).flow_notices
        while True:
            try:
                with translated(self._stream):
                    async with self._client.pubsub() as pubsub:
                        await pubsub.ssubscribe(channel)
                        backoff.reset()
                        self._poke.set()  # notices sent while unsubscribed: read again
                        await self._follow(pubsub)
            except RedisFailure as e:
                log.debug("flow channel %s lost (%s); the record is still read", channel, e)
                await anyio.sleep(backoff.next())

    async def _follow(self, pubsub: aioredis.client.PubSub) -> None:
        live = Liveness.of(pubsub)
        while True:
            message = await pubsub.get_message(timeout=live.wait())
            kind = None if message is None else message["type"]
            if kind == "pong":
                live.answered()
            elif kind == "sunsubscribe":  # the channel's slot moved: subscribe again
                raise ServerUnavailableError("the server ended the flow subscription")
            elif kind in ("smessage", "message") and message is not None:
                self._notice(message["data"])
            await live.check(pubsub)

    def _notice(self, data: bytes | str) -> None:
        if notice_group(data) == self._group:
            self._poke.set()


def _described(targets: frozenset[str]) -> str:
    if not targets:
        return "nothing paused"
    return "paused: " + ", ".join(sorted(targets))
