"""``streamq compat OLD NEW``: the changes between two AsyncAPI documents of a service
(:mod:`streamq._asyncapi`) that break consumers or publishers still running.

A change breaks when it is one of these, for a message type present in OLD:

- the type is removed (its entries, still published or waiting, find no handler);
- its schema version goes down, or up without an upcast from the old version (entries of
  the old version could not be brought to the new model);
- at the same version: a field the old model requires is removed (consumers still running
  the old model refuse what new publishers write), a field changes its type, a field is
  required by the new model without a default (entries written before lack it), or the
  values a field allows change (an enum or a ``Literal`` that loses a value refuses
  entries written before; one that gains a value is refused by the old consumers).

Fields are compared down nested models, named by their path (``order.address.zip``,
``order.lines[].qty``); a nested model is compared by its shape, not its class name. A
payload that is not an object is compared by its type.

A version bump *with* an upcast from the old version is the way to change the fields: the
upcast turns old entries into the new model, and consumers of the old version leave
entries of the new one for a consumer that knows it.
"""

from __future__ import annotations

import json
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
        if self.field is None:
            return f"{self.type}: {self.why}"
        where = self.field if self.field.startswith("[") else f".{self.field}"
        return f"{self.type}{where}: {self.why}"


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
    compare = _Comparison(name, old, new)
    return compare.schemas(None, was.get("payload"), now.get("payload"), ())


def _resolve(doc: Document, schema: Any) -> Mapping[str, Any]:
    for _ in range(32):  # a chain of references, not a cycle
        if not isinstance(schema, Mapping):
            return {}
        all_of = schema.get("allOf")
        if "$ref" not in schema and isinstance(all_of, list) and len(all_of) == 1:
            schema = all_of[0]  # a reference with siblings, as some generators write it
            continue
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith(_REF):
            return schema
        schema = doc.get("components", {}).get("schemas", {}).get(ref[len(_REF) :])
    return {}


def _within(path: str | None, step: str) -> str:
    """The path of a field (``.zip``) or of an array's items (``[]``) within ``path``."""
    if path is None:
        return step.removeprefix(".")
    return f"{path}{step}"


@dataclass(frozen=True, slots=True)
class _Comparison:
    """The schemas of one message type in OLD and NEW, compared from its payload down.

    A nested model is compared by its shape, not its name: references are followed, so a
    class renamed with the same fields is no change. ``seen`` holds the pairs of schemas
    already being compared above, so a recursive model is compared once per level."""

    name: str
    old: Document
    new: Document

    def schemas(
        self, path: str | None, was: Any, now: Any, seen: tuple[tuple[int, int], ...]
    ) -> list[Breaking]:
        was, now = _resolve(self.old, was), _resolve(self.new, now)
        pair = (id(was), id(now))
        if pair in seen:
            return []
        seen = (*seen, pair)
        before, after = _kind(self.old, was), _kind(self.new, now)
        if before != after:
            why = f"retyped from {before} to {after}"
            return [Breaking(self.name, path, why if path else f"payload {why}")]
        values = _values_change(was, now)
        if values is not None:
            return [Breaking(self.name, path, values)]
        if _is_object(was):
            return self._fields(path, was, now, seen)
        if was.get("type") == "array":
            return self.schemas(_within(path, "[]"), was.get("items"), now.get("items"), seen)
        return self._members(path, was, now, seen)

    def _members(
        self, path: str | None, was: Mapping[str, Any], now: Mapping[str, Any],
        seen: tuple[tuple[int, int], ...],
    ) -> list[Breaking]:  # fmt: skip
        """A union's members of the same kind (the ``Address`` of ``Address | None``),
        compared where each side has one of that kind."""
        found = []
        for union in ("anyOf", "oneOf"):
            before = _by_kind(self.old, was.get(union))
            after = _by_kind(self.new, now.get(union))
            for kind, members in before.items():
                if len(members) == 1 and len(after.get(kind, [])) == 1:
                    found += self.schemas(path, members[0], after[kind][0], seen)
        return found

    def _fields(
        self, path: str | None, was: Mapping[str, Any], now: Mapping[str, Any],
        seen: tuple[tuple[int, int], ...],
    ) -> list[Breaking]:  # fmt: skip
        before, after = was.get("properties", {}), now.get("properties", {})
        found = []
        for field, schema in before.items():
            where = _within(path, f".{field}")
            if field in after:
                found += self.schemas(where, schema, after[field], seen)
            elif field in was.get("required", []):
                found.append(Breaking(self.name, where, "removed, and the old model requires it"))
        found += self._newly_required(path, was, now)
        extra_before, extra_after = was.get("additionalProperties"), now.get("additionalProperties")
        if isinstance(extra_before, Mapping) and isinstance(extra_after, Mapping):
            found += self.schemas(_within(path, "[*]"), extra_before, extra_after, seen)
        return found

    def _newly_required(
        self, path: str | None, was: Mapping[str, Any], now: Mapping[str, Any]
    ) -> list[Breaking]:
        before, required_before = was.get("properties", {}), set(was.get("required", []))
        found = []
        for field, schema in now.get("properties", {}).items():
            if field not in now.get("required", []) or field in required_before:
                continue
            if "default" in schema or "default" in _resolve(self.new, schema):
                continue
            why = "now required, without a default" if field in before else (
                "new required field without a default"
            )  # fmt: skip
            where = _within(path, f".{field}")
            found.append(Breaking(self.name, where, f"{why}: entries written before lack it"))
        return found


def _allowed(schema: Mapping[str, Any]) -> list[str] | None:
    """The values a schema allows (an enum, a Literal: ``enum`` or ``const``) as JSON
    text, in their order; None when it allows any value of its type."""
    if "const" in schema:
        return [json.dumps(schema["const"])]
    values = schema.get("enum")
    return [json.dumps(v) for v in values] if isinstance(values, list) else None


def _shown(values: list[str]) -> str:
    return ", ".join(repr(json.loads(v)) for v in values)


def _values_change(was: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """Why a change of the allowed values breaks (None when they are the same): a value
    removed is in entries written before; a value added is refused by the consumers still
    running the old model."""
    before, after = _allowed(was), _allowed(now)
    if before == after or (before is not None and after is not None and set(before) == set(after)):
        return None
    if before is None:
        return f"now only {_shown(after or [])}: entries written before may hold other values"
    if after is None:
        return (
            f"no longer only {_shown(before)}: consumers still running the old model refuse "
            "other values"
        )
    removed = [v for v in before if v not in after]
    added = [v for v in after if v not in before]
    said = []
    if removed:
        said.append(f"{_values(removed)} no longer allowed: entries written before may hold "
                    f"{'them' if len(removed) > 1 else 'it'}")  # fmt: skip
    if added:
        said.append(f"{_values(added)} added: consumers still running the old model refuse "
                    f"{'them' if len(added) > 1 else 'it'}")  # fmt: skip
    return "; ".join(said)


def _values(values: list[str]) -> str:
    return f"value{'s' if len(values) > 1 else ''} {_shown(values)}"


def _is_object(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "object"


def _by_kind(doc: Document, members: Any) -> dict[str, list[Any]]:
    kinds: dict[str, list[Any]] = {}
    for member in members if isinstance(members, list) else []:
        kinds.setdefault(_kind(doc, member), []).append(member)
    return kinds


def _kind(doc: Document, schema: Any) -> str:
    """A schema's type as text (``integer``, ``array of string``, ``object``,
    ``integer|null``), what a retype changes. A model is an ``object`` whatever its name:
    its fields are compared one by one."""
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
