"""Prometheus export (extra ``[metrics]``): the consumer's counters and histograms, plus
queue gauges read from Redis at scrape time, so a stalled queue shows even when no message
flows: stream length, dead letters, and per group pending, lag and oldest pending age; and
of a consumer of a group in shared mode, the entries it holds back for flow control, by
reason (``streamq_waiting_entries{reason="pause|rate_limit|throttle"}``).

    from streamq.metrics import serve_metrics
    server = serve_metrics(mq, port=9108)     # http://127.0.0.1:9108/metrics
    server = serve_metrics(mq, addr="0.0.0.0")  # in a container: reachable through its port

``serve_metrics`` serves a registry of its own with streamq's collector and the process
metrics (``process_*``, ``python_*``); ``registry=`` serves an existing one instead. To add
streamq's metrics to an application's registry served elsewhere::

    prometheus_client.REGISTRY.register(QueueCollector(mq))
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._ids import StreamId
from .errors import ConfigError
from .wire import replies
from .wire.client import connect_sync
from .wire.damage import damaged_counts
from .wire.keys import Keys
from .wire.urls import redact
from .wire.wrong_type import unless_wrong_type_sync

if TYPE_CHECKING:
    from .queue import MessageQueue

log = logging.getLogger(__name__)

PREFIX = "streamq"
WAITING_REASONS = ("pause", "rate_limit", "throttle")  # mq.stats()'s waiting_<reason> gauges


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as e:
        raise ConfigError(
            "metrics export needs the [metrics] extra: pip install streamq[metrics]"
        ) from e
    return prometheus_client


class QueueCollector:
    """A prometheus_client collector for one or more queues."""

    def __init__(self, *queues: MessageQueue) -> None:
        self.queues = queues
        self._deployments: dict[str, Any] = {}

    def close(self) -> None:
        for deployment in self._deployments.values():
            deployment.close()
        self._deployments.clear()

    def describe(self) -> list[Any]:
        return []  # metrics are dynamic; prometheus_client then calls collect() to learn them

    def collect(self) -> Iterator[Any]:
        core = _prometheus().core
        labels = ["stream", "group", "consumer"]
        names = ("received", "handled", "failed", "retried", "dead_lettered", "skipped",
                 "claimed", "acked", "scheduled_moved", "forwarded")  # fmt: skip
        counters = {
            name: core.CounterMetricFamily(
                f"{PREFIX}_{name}", f"entries {name.replace('_', ' ')}", labels=labels
            )
            for name in names
        }
        in_flight = core.GaugeMetricFamily(
            f"{PREFIX}_in_flight", "entries fetched, not finished", labels=labels
        )
        duration = core.HistogramMetricFamily(
            f"{PREFIX}_handler_seconds", "handler duration", labels=labels
        )
        batch = core.HistogramMetricFamily(
            f"{PREFIX}_batch_size", "entries per batch call", labels=labels
        )
        lateness = core.HistogramMetricFamily(
            f"{PREFIX}_scheduled_lateness_seconds",
            "how long after its due time a scheduled message was added to the stream",
            labels=labels,
        )
        for mq in self.queues:
            # a fan-out queue (group None) is labelled group=""
            stats, values = mq.stats(), [mq.stream, mq.group or "", mq.consumer]
            if not stats:
                continue
            for name, family in counters.items():
                family.add_metric(values, stats[name])
            in_flight.add_metric(values, stats["in_flight"])
            for family, key in (
                (duration, "handler_seconds"), (batch, "batch_size"),
                (lateness, "scheduled_lateness_seconds"),
            ):  # fmt: skip
                h = stats[key]
                buckets = [(_le(bound), n) for bound, n in h["buckets"]]
                family.add_metric(values, buckets, h["sum"])
        yield from counters.values()
        yield from (in_flight, duration, batch, lateness)
        yield from self._ordered_metrics(core, labels)
        yield from self._waiting_metrics(core, labels)
        yield _damaged_records(core)
        yield from self._queue_gauges(core)

    def _ordered_metrics(self, core: Any, labels: list[str]) -> Iterator[Any]:
        """Of ordered consumers: partitions owned, rebalances, halted keys."""
        owned = core.GaugeMetricFamily(
            f"{PREFIX}_owned_partitions", "partitions this ordered consumer owns", labels=labels
        )
        rebalances = core.CounterMetricFamily(
            f"{PREFIX}_rebalances", "assignment changes seen by this ordered consumer",
            labels=labels,
        )  # fmt: skip
        halted = core.GaugeMetricFamily(
            f"{PREFIX}_halted_keys", "keys halted on a poison entry", labels=labels
        )
        found = False
        for mq in self.queues:
            stats = mq.stats()
            if "owned_partitions" not in stats:
                continue
            found, values = True, [mq.stream, mq.group, mq.consumer]
            owned.add_metric(values, len(stats["owned_partitions"]))
            rebalances.add_metric(values, stats["rebalances"])
            halted.add_metric(values, stats["halted_keys"])
        if found:
            yield from (owned, rebalances, halted)

    def _waiting_metrics(self, core: Any, labels: list[str]) -> Iterator[Any]:
        """Of consumers that hold entries back for flow control (shared mode, with a
        group): the entries waiting now, by reason."""
        waiting = core.GaugeMetricFamily(
            f"{PREFIX}_waiting_entries",
            "entries fetched and held back for flow control (paused, over a rate limit, "
            "throttled), by reason",
            labels=[*labels, "reason"],
        )  # fmt: skip
        found = False
        for mq in self.queues:
            stats = mq.stats()
            if "waiting_pause" not in stats:
                continue
            found, values = True, [mq.stream, mq.group or "", mq.consumer]
            for reason in WAITING_REASONS:
                waiting.add_metric([*values, reason], stats[f"waiting_{reason}"])
        if found:
            yield waiting

    def _queue_gauges(self, core: Any) -> Iterator[Any]:
        length = core.GaugeMetricFamily(
            f"{PREFIX}_stream_length", "entries in the stream", labels=["stream"]
        )
        dead = core.GaugeMetricFamily(
            f"{PREFIX}_dead_letters", "entries in the dead-letter stream", labels=["stream"]
        )
        pending = core.GaugeMetricFamily(
            f"{PREFIX}_group_pending", "entries delivered, not acked", labels=["stream", "group"]
        )
        lag = core.GaugeMetricFamily(
            f"{PREFIX}_group_lag",
            "entries not yet delivered to the group",
            labels=["stream", "group"],
        )
        oldest = core.GaugeMetricFamily(
            f"{PREFIX}_group_oldest_pending_age_seconds",
            "age of the oldest pending entry",
            labels=["stream", "group"],
        )
        scheduled = core.GaugeMetricFamily(
            f"{PREFIX}_scheduled_messages", "messages waiting to be delivered", labels=["stream"]
        )
        # a partitioned topic: one series per partition stream (labelled with its name)
        for stream, url in sorted({(s, mq.url) for mq in self.queues for s in mq.streams}):
            try:
                self._stream_gauges(url, stream, length, dead, pending, lag, oldest, scheduled)
            except Exception as e:  # a scrape must not fail because Redis is away
                log.warning("queue gauges of %s unavailable: %s", stream, redact(str(e)))
        yield from (length, dead, pending, lag, oldest, scheduled)

    def _stream_gauges(self, url: str, stream: str, *families: Any) -> None:
        length, dead, pending, lag, oldest, scheduled = families
        deployment = self._deployments.get(url)
        if deployment is None:
            deployment = self._deployments[url] = connect_sync(url)
        client, keys = deployment.client_for(stream), Keys(stream)
        length.add_metric([stream], client.xlen(stream))
        # one of streamq's keys of another type: its gauge is left out, not the stream's
        for family, key, record, read, expected in (
            (dead, keys.dead_letters, "dead_letters", client.xlen, "stream"),
            (scheduled, keys.scheduled, "scheduled", client.zcard, "zset"),
        ):
            count = unless_wrong_type_sync(
                functools.partial(read, key), client, record, key, expected, None,
                "left out of the metrics",
            )  # fmt: skip
            if count is not None:
                family.add_metric([stream], count)
        if not client.exists(stream):
            return
        now_ms = time.time() * 1000
        for group in replies.groups(client.xinfo_groups(stream)):
            name = group.name
            pending.add_metric([stream, name], group.pending)
            if group.lag is not None:
                lag.add_metric([stream, name], group.lag)
            age = 0.0
            if group.pending:
                first = replies.pending_rows(
                    client.xpending_range(stream, name, min="-", max="+", count=1)
                )
                if first:
                    age = max(now_ms - StreamId.parse(first[0].id).ms, 0) / 1000
            oldest.add_metric([stream, name], age)


def _damaged_records(core: Any) -> Any:
    """Damaged records of streamq's own keys this process found, per kind (each record
    once: see streamq.wire.damage)."""
    family = core.CounterMetricFamily(
        f"{PREFIX}_damaged_records", "damaged records of streamq's own keys set aside",
        labels=["kind"],
    )  # fmt: skip
    for kind, count in sorted(damaged_counts().items()):
        family.add_metric([kind], count)
    return family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class MetricsServer:
    """The running /metrics endpoint: ``address``, ``port`` and ``close()``."""

    def __init__(self, httpd: Any, collector: QueueCollector, registry: Any) -> None:
        self._httpd, self._collector, self._registry = httpd, collector, registry

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    def close(self) -> None:
        """Stop serving; take streamq's collector out of the registry and close its clients."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._registry.unregister(self._collector)
        self._collector.close()


def serve_metrics(
    *queues: MessageQueue, port: int = 9108, addr: str = "127.0.0.1", registry: Any = None
) -> MetricsServer:
    """Serve /metrics over HTTP in a background thread.

    Parameters:
        queues: the queues whose counters and queue gauges are exported.
        port: the TCP port (``0`` picks a free one: see ``MetricsServer.port``).
        addr: the address to bind; the default is loopback only, ``"0.0.0.0"`` listens on
            every interface (in a container, so that its published port reaches it).
        registry: a ``prometheus_client`` registry to serve, with streamq's collector
            added (e.g. ``prometheus_client.REGISTRY`` with the application's metrics).
            By default a registry of its own, with the process, platform and GC collectors
            (``process_*``, ``python_*``) beside streamq's metrics.

    Raises ConfigError without the ``[metrics]`` extra; OSError if the port is taken.
    """
    prometheus = _prometheus()
    if registry is None:
        registry = prometheus.CollectorRegistry()
        prometheus.ProcessCollector(registry=registry)
        prometheus.PlatformCollector(registry=registry)
        prometheus.GCCollector(registry=registry)
    collector = QueueCollector(*queues)
    registry.register(collector)
    try:
        started = prometheus.start_http_server(port, addr=addr, registry=registry)
    except BaseException:
        registry.unregister(collector)
        raise
    if not isinstance(started, tuple):  # prometheus-client < 0.20 does not return the server
        registry.unregister(collector)
        raise ConfigError("streamq.metrics needs prometheus-client >= 0.20")
    return MetricsServer(started[0], collector, registry)
