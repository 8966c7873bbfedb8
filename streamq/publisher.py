"""A synchronous publisher for code that is not async (Django, Flask, scripts, workers)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from .errors import ConfigError
from .message import encode_entry
from .tracing import with_trace_context
from .wire import resp
from .wire.client import connect_sync, ride_through_sync
from .wire.coalesce_sync import SyncCoalescer
from .wire.keys import validate_stream_name


def xadd_chunks(
    stream: str, message_type: str, items: Iterable[Any], meta: Mapping[str, str] | None,
    chunk: int,
) -> Iterator[tuple[bytes, int]]:  # fmt: skip
    """Packed ``XADD`` commands, ``chunk`` per pipeline, and how many each holds.

    Every item is encoded before the first chunk is yielded: a bad item raises
    MessageFormatError and nothing is sent.
    """
    encoded = [encode_entry(message_type, item, meta) for item in items]
    for start in range(0, len(encoded), chunk):
        yield resp.pack_xadds(stream, encoded[start : start + chunk])


class Publisher:
    """Publish typed messages with a blocking client; thread-safe (a connection pool).

    ``url=None`` uses ``$STREAMQ_REDIS_URL``, else this process's embedded server; any
    node of a Redis Cluster works (``cluster`` as for :class:`streamq.MessageQueue`).
    """

    def __init__(
        self, url: str | None = None, stream: str = "task-stream", *, cluster: bool | None = None
    ) -> None:
        validate_stream_name(stream)
        if cluster not in (None, True, False):
            raise ConfigError(f"cluster must be None, True or False, got {cluster!r}")
        if url is None:
            from .server.single import default_url

            url = default_url()
        self.url, self.stream = url, stream
        self._deployment = connect_sync(url, cluster=cluster)
        self._client = self._deployment.client_for(stream)
        self._coalescer = SyncCoalescer()  # threads publishing at once share writes

    def publish(self, message_type: str, data: Any, meta: Mapping[str, str] | None = None) -> str:
        """Add one message; return its entry ID."""
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        fields = encode_entry(message_type, data, meta)

        def xadd() -> str:
            return self._coalescer.xadd(self._client, self.stream, fields)

        return ride_through_sync(self._deployment, xadd)

    def publish_many(
        self, message_type: str, items: Iterable[Any], meta: Mapping[str, str] | None = None,
        *, chunk: int = 1000,
    ) -> list[str]:  # fmt: skip
        """Add many messages of one type, pipelined; return their IDs in order."""
        meta = with_trace_context(meta)
        ids: list[str] = []
        for packed, count in xadd_chunks(self.stream, message_type, items, meta, chunk):

            def send(packed: bytes = packed, count: int = count) -> list[Any]:
                return resp.execute_sync(self._client, packed, count)

            ids.extend(i.decode() for i in ride_through_sync(self._deployment, send))
        return ids

    def close(self) -> None:
        self._coalescer.close()
        self._deployment.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
