"""Structured logs: who logged, and about which entry.

While a consumer runs, every log record made in its tasks (streamq's own and the
handlers') carries the consumer's identity, and while an entry is handled, the entry's::

    record.streamq_stream, record.streamq_group, record.streamq_consumer
    record.streamq_entry_id, record.streamq_type, record.streamq_delivery

(for a batch, ``streamq_entry_id`` is the list of its IDs and ``streamq_delivery`` the
highest delivery count). They are set by a log record factory wrapped around the current
one, from context variables, so they reach any handler or formatter without a filter;
the ``streamq_`` prefix keeps them clear of a handler's own ``extra=`` keys.

:class:`JsonFormatter` writes one JSON object per line with these fields as ``stream``,
``group``, ``consumer``, ``entry_id``, ``type``, ``delivery``, every other ``extra``, and
the traceback of a failure; :func:`configure_logging` sets up a process (``streamq run
--log-level --log-format json|text``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol, TextIO

from .errors import ConfigError


class ConsumerContext(NamedTuple):
    stream: str
    group: str
    consumer: str


# (entry_id, type, delivery): a plain tuple, built per entry (a NamedTuple costs 4x more)
EntryContext = tuple[str | list[str], str, int]


class Entry(Protocol):
    """An entry as the log context of its handling (a RawEntry): its fields are read when
    a record is made, so setting it costs nothing per entry but the set."""

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str | None: ...
    @property
    def delivery_count(self) -> int: ...


CONSUMER: ContextVar[ConsumerContext | None] = ContextVar("streamq_log_consumer", default=None)
ENTRY: ContextVar[EntryContext | Entry | None] = ContextVar("streamq_log_entry", default=None)

# record attribute -> key in the JSON output
FIELDS = {
    "streamq_stream": "stream",
    "streamq_group": "group",
    "streamq_consumer": "consumer",
    "streamq_entry_id": "entry_id",
    "streamq_type": "type",
    "streamq_delivery": "delivery",
}
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

_NO_CONSUMER = (None, None, None)
_NO_ENTRY = (None, None, None)
_installed = False
_install_lock = threading.Lock()


def install_record_factory() -> None:
    """Wrap the current log record factory once, so records carry the context fields."""
    global _installed
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            # every record has the six fields (None outside a consumer or an entry), so a
            # format string naming them never fails
            consumer = CONSUMER.get()
            record.streamq_stream, record.streamq_group, record.streamq_consumer = (
                _NO_CONSUMER if consumer is None else consumer
            )
            entry = ENTRY.get() if consumer is not None else None
            record.streamq_entry_id, record.streamq_type, record.streamq_delivery = (
                _NO_ENTRY
                if entry is None
                else entry
                if isinstance(entry, tuple)
                else (entry.id, entry.type, entry.delivery_count)
            )
            return record

        logging.setLogRecordFactory(factory)
        _installed = True


async def run_as_consumer(
    run: Callable[[], Coroutine[Any, Any, None]], stream: str, group: str, consumer: str
) -> None:
    """Await ``run()`` with the consumer's identity in the log context of every task it
    starts (tasks inherit the context they are started from)."""
    install_record_factory()
    token = CONSUMER.set(ConsumerContext(stream, group, consumer))
    try:
        await run()
    finally:
        CONSUMER.reset(token)


def context_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The context fields a record carries (not None), by their JSON names."""
    return {
        key: value
        for attr, key in FIELDS.items()
        if (value := getattr(record, attr, None)) is not None
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the streamq context
    fields, the record's other ``extra`` values, and ``exc_info`` (the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            **context_fields(record),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in FIELDS and not key.startswith("_"):
                out.setdefault(key, value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message [stream=… group=… consumer=… entry_id=… …]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        fields = context_fields(record)
        if fields:
            text += " [" + " ".join(f"{key}={value}" for key, value in fields.items()) + "]"
        return text


LOG_FORMATS = ("text", "json")


def configure_logging(
    level: str | int = "INFO", fmt: str = "text", stream: TextIO | None = None
) -> None:
    """Set up the root logger of a process streamq owns (``streamq run``): one handler
    on stderr, text or JSON, replacing any there was; Python's warnings go through it."""
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    logging.captureWarnings(True)  # a library's warning: a record of the format too
    install_record_factory()
