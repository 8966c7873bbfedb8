"""``streamq compat OLD NEW``: the changes between two AsyncAPI documents of a service
(:mod:`streamq.asyncapi`) that break consumers or publishers still running.

A change breaks when it is one of these, for a message type present in OLD:

- the type is removed (its entries, still published or waiting, find no handler);
- its schema version goes down, or up without an upcast from the old version (entries of
  the old version could not be brought to the new model);
- at the same version: a field the old model requires is removed (consumers still running
  the old model refuse what new publishers write), a field changes its type, or a field
  is required by the new model without a default (entries written before lack it).

A version bump *with* an upcast from the old version is the way to change the fields: the
upcast turns old entries into the new model, and consumers of the old version leave
entries of the new one for a consumer that knows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Document = Mapping[str, Any]
_REF = "#/components/schemas/"


@dataclass(frozen=True, slots=True)
class Breaking:
    """One breaking change: the message ``type``, the ``field`` (None for the type as a
    whole) and ``why`` it breaks."""

    type: str
    field: str | None
    why: str

    def __str__(self) -> str:
        where = self.type if self.field is None else f"{self.type}.{self.field}"
        return f"{where}: {self.why}"


def breaking_changes(old: Document, new: Document) -> list[Breaking]:
    """The changes from ``old`` to ``new`` that break running consumers or publishers."""
    found: list[Breaking] = []
    new_messages = _messages(new)
    for name, was in sorted(_messages(old).items()):
        now = new_messages.get(name)
        if now is None:
            found.append(Breaking(name, None, "type removed: its entries find no handler"))
            continue
        found.extend(_message_changes(name, old, was, new, now))
    return found


def _messages(doc: Document) -> dict[str, Mapping[str, Any]]:
    messages = doc.get("components", {}).get("messages", {})
    return {str(m.get("name", key)): m for key, m in messages.items() if isinstance(m, Mapping)}


def _version(message: Mapping[str, Any]) -> int:
    version = message.get("x-streamq-version", 1)
    return version if isinstance(version, int) else 1


def _message_changes(
    name: str, old: Document, was: Mapping[str, Any], new: Document, now: Mapping[str, Any]
) -> list[Breaking]:
    before, after = _version(was), _version(now)
    if after < before:
        return [Breaking(name, None, f"version goes down from {before} to {after}: entries "
                         f"of version {before} wait for a consumer that knows it")]  # fmt: skip
    if after > before:
        if before in now.get("x-streamq-upcast-from", []):
            return []
        return [Breaking(name, None, f"version {before} -> {after} without an upcast from "
                         f"version {before}: give upcast={{{before}: ...}}")]  # fmt: skip
    return _field_changes(name, _object(old, was.get("payload")), _object(new, now.get("payload")))


def _resolve(doc: Document, schema: Any) -> Mapping[str, Any]:
    for _ in range(32):  # a chain of references, not a cycle
        if not isinstance(schema, Mapping):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith(_REF):
            return schema
        schema = doc.get("components", {}).get("schemas", {}).get(ref[len(_REF) :])
    return {}


def _object(doc: Document, schema: Any) -> tuple[Document, Mapping[str, Any]]:
    return doc, _resolve(doc, schema)


def _field_changes(
    name: str, old: tuple[Document, Mapping[str, Any]], new: tuple[Document, Mapping[str, Any]]
) -> list[Breaking]:
    (old_doc, was), (new_doc, now) = old, new
    before, after = was.get("properties", {}), now.get("properties", {})
    required_before, required_after = set(was.get("required", [])), set(now.get("required", []))
    found = []
    for field, schema in before.items():
        if field not in after:
            if field in required_before:
                found.append(Breaking(name, field, "removed, and the old model requires it"))
            continue
        kind_before, kind_after = _kind(old_doc, schema), _kind(new_doc, after[field])
        if kind_before != kind_after:
            found.append(Breaking(name, field, f"retyped from {kind_before} to {kind_after}"))
    for field, schema in after.items():
        newly = field in required_after and (field not in before or field not in required_before)
        if newly and "default" not in _resolve(new_doc, schema):
            why = "new required field without a default" if field not in before else (
                "now required, without a default"
            )  # fmt: skip
            found.append(Breaking(name, field, f"{why}: entries written before lack it"))
    return found


def _kind(doc: Document, schema: Any) -> str:
    """A field's type as text (``integer``, ``array of string``, ``Address``,
    ``integer|null``), what a retype changes."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        return str(schema["$ref"]).rpartition("/")[2]
    schema = _resolve(doc, schema)
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            return "|".join(sorted({_kind(doc, s) for s in schema[union]}))
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_kind(doc, schema.get('items', {}))}"
    if isinstance(kind, list):
        return "|".join(sorted(map(str, kind)))
    text = str(kind) if kind else "any"
    fmt = schema.get("format")
    return f"{text} ({fmt})" if fmt else text
