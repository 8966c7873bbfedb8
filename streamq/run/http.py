"""The supervisor's HTTP endpoints: ``/livez`` and ``/readyz`` (``--health-port``) and one
``/metrics`` for all workers (``--metrics-port``; the same port may serve both).

Workers report through their status files (:mod:`.status`); these endpoints read them, so
a probe never waits on a worker. ``/metrics`` merges every worker's counters (each worker
is its own ``consumer`` label, stable across restarts: a restart shows as a counter reset)
with the queue gauges read from Redis once per stream, by streamq's QueueCollector.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast

from ..metrics import QueueCollector, _prometheus
from .status import is_fresh

if TYPE_CHECKING:
    from ..queue import MessageQueue

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
PUBLIC_QUEUE_FIELDS = (
    "stream", "group", "consumer", "ready", "connected", "consuming", "state", "stop_reason",
    "pending", "lag", "error",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What the supervisor knows of one slot when a probe asks."""

    slot: int
    pid: int | None
    alive: bool
    restarts: int
    status: dict[str, Any] | None


def readiness(workers: Sequence[WorkerView], stopping: bool, interval: float) -> dict[str, Any]:
    """Ready when not draining and every slot's worker runs, reported lately, and is ready
    (every queue connected and consuming)."""
    rows = [_worker_row(worker, interval) for worker in workers]
    ready = not stopping and bool(rows) and all(row["ready"] for row in rows)
    return {"ready": ready, "stopping": stopping, "workers": rows}


def _worker_row(worker: WorkerView, interval: float) -> dict[str, Any]:
    status = worker.status
    current = (
        status is not None
        and worker.alive
        and status.get("pid") == worker.pid
        and is_fresh(status, interval)
    )
    queues = [] if status is None else status.get("queues", [])
    return {
        "slot": worker.slot,
        "pid": worker.pid,
        "alive": worker.alive,
        "restarts": worker.restarts,
        "ready": bool(current and status and status.get("ready")),
        "queues": [{k: q.get(k) for k in PUBLIC_QUEUE_FIELDS} for q in queues],
    }


def health_routes(
    workers: Callable[[], Sequence[WorkerView]], stopping: Callable[[], bool], interval: float
) -> dict[str, Callable[[], Response]]:
    def livez() -> Response:
        return _json(200, {"alive": True, "workers": len(workers())})

    def readyz() -> Response:
        report = readiness(workers(), stopping(), interval)
        return _json(200 if report["ready"] else 503, report)

    return {"/livez": livez, "/readyz": readyz}


def _json(code: int, body: dict[str, Any]) -> Response:
    return code, "application/json", json.dumps(body, default=str).encode()


class _QueueView:
    """A worker's queue as QueueCollector reads a MessageQueue: identity, URL, stats()."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        # a fan-out queue's group is None: labelled "" as QueueCollector does
        self.stream, self.group = str(report["stream"]), str(report["group"] or "")
        self.consumer, self.url = str(report["consumer"]), str(report["url"])
        # a partitioned topic's partition streams (a plain stream: itself)
        self.streams = tuple(str(s) for s in report.get("streams") or [self.stream])
        self._stats: dict[str, Any] = report.get("stats") or {}

    def stats(self) -> dict[str, Any]:
        return self._stats


class WorkersCollector(QueueCollector):
    """QueueCollector over the queues the workers last reported."""

    def __init__(self, statuses: Callable[[], list[dict[str, Any]]]) -> None:
        super().__init__()
        self._statuses = statuses

    def collect(self) -> Iterator[Any]:
        views = [
            _QueueView(queue)
            for status in self._statuses()
            for queue in status.get("queues", [])
            if "url" in queue
        ]
        self.queues = cast("tuple[MessageQueue, ...]", tuple(views))
        yield from super().collect()


def metrics_routes(
    statuses: Callable[[], list[dict[str, Any]]],
) -> tuple[dict[str, Callable[[], Response]], WorkersCollector]:
    """``/metrics`` over a registry of its own: the workers' queues and the supervisor's
    process metrics. Raises ConfigError without the ``[metrics]`` extra."""
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry()
    prometheus.ProcessCollector(registry=registry)
    prometheus.PlatformCollector(registry=registry)
    collector = WorkersCollector(statuses)
    registry.register(collector)

    def metrics() -> Response:
        return 200, prometheus.CONTENT_TYPE_LATEST, prometheus.generate_latest(registry)

    return {"/metrics": metrics}, collector


class ListenError(OSError):
    """An endpoint cannot listen on its address (the port is taken, the host not ours)."""


class HttpEndpoints:
    """A small threaded HTTP server for some GET routes (probes and scrapes).

    Raises ListenError naming the address and the routes when it cannot listen."""

    def __init__(self, host: str, port: int, routes: Mapping[str, Callable[[], Response]]):
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(dict(routes)))
        except OSError as e:
            paths = " ".join(sorted(routes))
            raise ListenError(
                f"cannot listen on {host}:{port} for {paths}: {e.strerror or e}"
            ) from e
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(routes: dict[str, Callable[[], Response]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the stdlib's name
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self.send_error(404, f"not found; try {', '.join(sorted(routes))}")
                return
            try:
                code, content_type, body = route()
            except Exception as e:  # a probe answers, even about its own failure
                log.exception("%s failed", self.path)
                code, content_type, body = 500, "text/plain", str(e).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler
