"""What a queue's consumer needs to stage outputs (``msg.publish``, ``msg.transaction``),
and the staging and writer of one stream's outputs and the replier of its requests, each
made when first used.

Any handler may stage outputs and any entry may be a request (``mq.request``), so every
consumer of a queue has a staging and a replier; most handlers stage none and most queues
see no request, so the encoding of outputs, the scripts that write them with the acks
(:mod:`.outputs`, :mod:`streamq.wire.outputs`) and the replies (:mod:`.replies`) load with
the first output or command staged (:class:`StagingOnUse`), the first write of one
(:class:`WriterOnUse`) and the first reply (:class:`ReplierOnUse`): a consumer that uses
none of them never loads them (part of its memory).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import redis.asyncio as aioredis

from ..errors import ConfigError
from ..message import OutputStaging
from ..payload.encoding import PayloadCodec

if TYPE_CHECKING:
    from ..message import RawEntry
    from ..payload.keyring import Keyring
    from ..topic.handle import TopicHandle
    from .stats import Stats

Key = str | bytes
Staged = tuple[str, Sequence[Any]]  # an entry's ID, its outputs and commands (.outputs)


@dataclass(frozen=True, slots=True)
class OutputSettings:
    """What a queue's consumer needs to stage outputs: its payload settings, its topic's
    partitions and how it chooses one, and whether the deployment is a cluster."""

    codec: PayloadCodec
    topic: str
    streams: tuple[str, ...]
    partition: Callable[[Key | None], int]
    cluster: Callable[[], bool]

    @classmethod
    def of(cls, handle: TopicHandle) -> OutputSettings:
        """A queue's, whose topic is ``handle``."""
        return cls(handle.codec, handle.stream, handle.streams, handle.partition,
                   lambda: bool(handle.deployment.cluster))  # fmt: skip


class StagingOnUse:
    """The :class:`~.outputs.Staging` of ``stream``, made by the first output or command a
    handler stages."""

    def __init__(self, settings: OutputSettings, stream: str) -> None:
        self._settings, self.stream = settings, stream
        self._staging: OutputStaging | None = None

    def _made(self) -> OutputStaging:
        if self._staging is None:
            # loaded on first use: a consumer whose handlers stage nothing never loads it
            from .outputs import Staging

            self._staging = Staging(self._settings, self.stream)
        return self._staging

    def output(
        self,
        type_name: str,
        data: Any,
        stream: str | None,
        key: Key | None,
        meta: Mapping[str, str] | None,
    ) -> Any:
        return self._made().output(type_name, data, stream, key, meta)

    def source(self) -> str:
        """The stream the entries come from: a transaction's keys live on its slot."""
        return self.stream

    def command(self, args: Sequence[bytes | str], keys: Sequence[str]) -> Any:
        return self._made().command(args, keys)


class Writer(Protocol):
    """What writes handled entries' outputs with their acks: :class:`~.outputs.OutputWriter`."""

    async def write(self, staged: Sequence[Staged], fence: tuple[str, str, str] | None) -> bool:
        """False when ordered mode's lease (``fence``) is not held: nothing was done."""


class WriterOnUse:
    """The :class:`~.outputs.OutputWriter` of ``stream``'s handled entries, made by the
    first write of staged outputs (its failed transactions are dead-lettered:
    :mod:`.failed_transactions`)."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        consumer: str,
        stats: Stats,
        *,
        cluster: Callable[[], bool],
        outboxed: Callable[[], None],
    ) -> None:
        self._client, self._stream, self._group = client, stream, group
        self._consumer, self._stats = consumer, stats
        self._cluster, self._outboxed = cluster, outboxed
        self._writer: Writer | None = None

    async def write(self, staged: Sequence[Staged], fence: tuple[str, str, str] | None) -> bool:
        if self._writer is None:
            self._writer = self._made()
        return await self._writer.write(staged, fence)

    def _made(self) -> Writer:
        # loaded on first use: a consumer whose handlers stage nothing never loads them
        from .failed_transactions import FailedTransactions
        from .outputs import OutputWriter

        client, stream, group = self._client, self._stream, self._group
        failed = FailedTransactions(client, stream, group, self._consumer, self._stats)
        return OutputWriter(client, stream, group, cluster=self._cluster,
                            outboxed=self._outboxed, failed=failed)  # fmt: skip


class Refused:
    """The staging of a consumer whose entries have no ack (fan-out): ``msg.publish``
    raises ConfigError saying why."""

    def output(
        self,
        type_name: str,
        data: Any,
        stream: str | None,
        key: Key | None,
        meta: Mapping[str, str] | None,
    ) -> NoReturn:
        raise ConfigError(
            "Message.publish writes outputs with the entry's ack, and a fan-out subscriber "
            "(group=None) acknowledges nothing: publish with mq.publish (written at once, "
            "not tied to the entry), or consume with a group"
        )

    def source(self) -> str:
        raise ConfigError(
            "Message.transaction runs its commands with the entry's ack, and a fan-out "
            "subscriber (group=None) acknowledges nothing: run them on your own client, or "
            "consume with a group"
        )

    def command(self, args: Sequence[bytes | str], keys: Sequence[str]) -> NoReturn:
        raise ConfigError("a fan-out subscriber (group=None) has no transactions")


class Replies(Protocol):
    """What answers the requests of one stream: :class:`~.replies.Replier`."""

    with_ack: bool  # a reply written without staging acks its request too
    staged: bool  # replies go with the acks as outputs (:meth:`output`)

    def output(self, entry: RawEntry, meta: dict[str, str], result: Any) -> Any: ...

    async def handled(self, entry: RawEntry, meta: dict[str, str], result: Any) -> None: ...

    async def failed(self, entry: RawEntry, meta: dict[str, str], reason: str) -> None: ...


class ReplierOnUse:
    """The :class:`~.replies.Replier` of ``stream``'s requests (its arguments), made by the
    first request handled or dead-lettered."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        *,
        with_ack: bool,
        staged: bool,
        acked: Callable[[int], None],
        keyring: Keyring | None,
    ) -> None:
        self._client, self._stream, self._group = client, stream, group
        self.with_ack, self.staged, self._acked, self._keyring = with_ack, staged, acked, keyring
        self._replier: Replies | None = None

    def _made(self) -> Replies:
        if self._replier is None:
            # loaded on first use: a queue that receives no request never loads it
            from .replies import Replier

            self._replier = Replier(
                self._client, self._stream, self._group, with_ack=self.with_ack,
                staged=self.staged, acked=self._acked, keyring=self._keyring,
            )  # fmt: skip
        return self._replier

    def output(self, entry: RawEntry, meta: dict[str, str], result: Any) -> Any:
        return self._made().output(entry, meta, result)

    async def handled(self, entry: RawEntry, meta: dict[str, str], result: Any) -> None:
        await self._made().handled(entry, meta, result)

    async def failed(self, entry: RawEntry, meta: dict[str, str], reason: str) -> None:
        await self._made().failed(entry, meta, reason)
