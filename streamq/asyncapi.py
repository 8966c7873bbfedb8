"""An AsyncAPI 3.0 document of a queue or an App: what it consumes and publishes.

One channel per stream or partitioned topic (its address is the stream's name; a
partitioned topic lists its partition streams), one message per type with the JSON Schema
of its pydantic model as payload and the entry's other fields (``type``, ``meta``,
``key``) as headers, a ``receive`` operation per handler and a ``send`` operation per
typed publisher (``mq.publisher(type, Model)``). Each message says its schema version and
the versions its handler upcasts from (``x-streamq-version``, ``x-streamq-upcast-from``),
which ``streamq compat`` compares between two documents (:mod:`streamq.payload.compat`).
Servers are the queues' URLs with any password removed; a queue on the embedded default
server has none unless one is running. Default values that may be secrets (secret-typed
and excluded fields, fields named as credentials, URLs with credentials) are left out of
the schemas (:mod:`._schema_secrets`).

``streamq asyncapi module:attr [--yaml] [--output F]`` prints it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import TypeAdapter

from ._schema_secrets import SecretFreeSchema
from ._version import __version__
from .config import env_url
from .payload.reading import versions_of
from .wire.urls import check_url

if TYPE_CHECKING:
    from .app import App
    from .queue import MessageQueue

ASYNCAPI_VERSION = "3.0.0"
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def asyncapi_document(app: App, *, title: str | None = None) -> dict[str, Any]:
    """The AsyncAPI 3.0 document (a JSON-ready dict) of every queue of ``app``."""
    doc = _Document(title or app.name)
    for mq in app.queues:
        doc.add_queue(mq)
    return doc.as_dict()


class _Document:
    def __init__(self, title: str) -> None:
        self.title = title
        self.servers: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.operations: dict[str, Any] = {}
        self.messages: dict[str, Any] = {}
        self.schemas: dict[str, Any] = {}

    def add_queue(self, mq: MessageQueue) -> None:
        server = self._server_of(mq)
        channel_id = _name(mq.stream)
        channel = self.channels.setdefault(channel_id, _channel(mq, server))
        for type_name, route in sorted(mq.route_table.routes.items()):
            versions = versions_of(route)
            message_id = self._message(type_name, route.model, versions.version, versions.upcast)
            channel["messages"][message_id] = {"$ref": f"#/components/messages/{message_id}"}
            group = getattr(mq, "group", None)
            operation_id = _name(f"receive-{mq.stream}-{group or 'fanout'}-{type_name}")
            self.operations[operation_id] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{channel_id}"},
                "messages": [{"$ref": f"#/channels/{channel_id}/messages/{message_id}"}],
                "summary": _receive_summary(route, group),
            }
        for type_name, model in sorted(_typed_publishers(mq).items()):
            message_id = self._message(type_name, model, _written_version(mq, type_name), {})
            channel["messages"][message_id] = {"$ref": f"#/components/messages/{message_id}"}
            self.operations[_name(f"send-{mq.stream}-{type_name}")] = {
                "action": "send",
                "channel": {"$ref": f"#/channels/{channel_id}"},
                "messages": [{"$ref": f"#/channels/{channel_id}/messages/{message_id}"}],
                "summary": f"publish {type_name!r} messages",
            }

    def _server_of(self, mq: MessageQueue) -> str | None:
        url = mq._url or env_url()
        if not url:
            return None
        server = _server(url)
        server_id = _name(server["host"])
        self.servers.setdefault(server_id, server)
        return server_id

    def _message(self, type_name: str, model: Any, version: int, upcast: Mapping[int, Any]) -> str:
        message_id = _name(type_name)
        if message_id not in self.messages:
            self.messages[message_id] = {
                "name": type_name,
                "title": type_name,
                "contentType": "application/json",
                "headers": _headers(type_name),
                "payload": self._schema_of(model),
                "x-streamq-version": version,
                "x-streamq-upcast-from": sorted(upcast),
            }
        return message_id

    def _schema_of(self, model: Any) -> dict[str, Any]:
        """``model``'s JSON Schema, its definitions moved to components.schemas."""
        if model is None or model is Any:
            return {"description": "any JSON value"}
        schema = TypeAdapter(model).json_schema(
            ref_template="#/components/schemas/{model}", schema_generator=SecretFreeSchema
        )
        for name, definition in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, definition)
        name = schema.get("title")
        if isinstance(name, str) and schema.get("type") == "object":
            self.schemas.setdefault(name, schema)
            return {"$ref": f"#/components/schemas/{name}"}
        return schema

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "asyncapi": ASYNCAPI_VERSION,
            "info": {
                "title": self.title,
                "version": "1.0.0",
                "description": f"Messages over Redis Streams, described by streamq {__version__}.",
            },
        }
        if self.servers:
            document["servers"] = self.servers
        document["channels"] = self.channels
        document["operations"] = self.operations
        document["components"] = {"messages": self.messages, "schemas": self.schemas}
        return document


def _channel(mq: MessageQueue, server: str | None) -> dict[str, Any]:
    channel: dict[str, Any] = {"address": mq.stream, "messages": {}}
    if mq.partitions > 1:
        channel["description"] = (
            f"A partitioned topic of {mq.partitions} streams (a key picks the partition): "
            + ", ".join(mq.streams)
        )
    else:
        channel["description"] = f"The Redis stream {mq.stream!r}."
    if server is not None:
        channel["servers"] = [{"$ref": f"#/servers/{server}"}]
    return channel


def _server(url: str) -> dict[str, Any]:
    """A server object for ``url``, without its user name and password."""
    check_url(url)  # one that urlsplit would misread is refused, without quoting it
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    server: dict[str, Any] = {
        "host": f"{host}:{parts.port}" if parts.port else host,
        "protocol": parts.scheme.split("+")[0] or "redis",
    }
    if parts.path and parts.path != "/":
        server["pathname"] = parts.path
    if parts.scheme.endswith("sentinel"):
        server["description"] = "Redis Sentinel: the master is asked of the sentinels"
    return server


def _headers(type_name: str) -> dict[str, Any]:
    """The entry's fields besides ``data`` (the payload): wire format v1."""
    return {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"type": "string", "const": type_name, "description": "routes the entry"},
            "meta": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "JSON object of strings (trace context, your own fields)",
            },
            "key": {"type": "string", "description": "the publish key, if any"},
            "ver": {"type": "string", "description": "the schema version (absent: 1)"},
            "enc": {
                "type": "string",
                "description": "how data is encoded: zstd, gzip, aesgcm, joined by +",
            },
            "kid": {"type": "string", "description": "the ID of the key that encrypted it"},
        },
    }


def _receive_summary(route: Any, group: str | None) -> str:
    how = "in batches" if route.batch is not None and route.single is None else "one by one"
    who = f"consumer group {group!r}" if group else "every instance (no consumer group)"
    return f"handle {route.type_name!r} messages {how}, read by {who}"


def _written_version(mq: MessageQueue, type_name: str) -> int:
    written = getattr(mq, "written_versions", None)
    return 1 if written is None else int(written(type_name))


def _typed_publishers(mq: MessageQueue) -> dict[str, Any]:
    """type -> model of the queue's typed publishers (``mq.publisher(type, Model)``)."""
    publishers = getattr(mq, "_typed_publishers", None)
    return dict(publishers) if publishers else {}


def _name(text: str) -> str:
    """``text`` as a component or channel name (``[A-Za-z0-9_.-]``)."""
    return _NAME.sub("_", text) or "_"
