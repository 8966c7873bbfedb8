"""JSON Schemas without the secrets of their defaults, for the AsyncAPI document.

A model's JSON Schema shows each field's default value, and the AsyncAPI document is
served by the dashboard to anyone who can reach it. pydantic masks ``SecretStr`` only; a
default ``api_key``, ``password``, database URL or excluded field would be shown as it is.
:class:`SecretFreeSchema` generates a schema that leaves out the default (and examples) of:

* secret-typed fields (``SecretStr``, ``SecretBytes``: ``writeOnly`` in the schema) and
  fields excluded from serialization (``Field(exclude=True)``);
* fields whose names say they hold credentials (``password``, ``secret``, ``token``,
  ``api_key``, ``credential``, ``private_key``, ``auth``, ``dsn``, ...);
* fields whose default holds, at any depth, a URL with credentials or a key named so;

at any nesting depth, in the definitions (``$defs``) too.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from .wire.urls import redact

# Words of a field name (snake_case, camelCase, kebab-case) that say it holds a credential.
CREDENTIAL_WORDS = frozenset({
    "password", "passwd", "pwd", "passphrase", "secret", "secrets", "token", "apikey",
    "credential", "credentials", "auth", "authorization", "privatekey", "dsn", "cookie",
})  # fmt: skip
CREDENTIAL_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})
HIDDEN_KEYWORDS = ("default", "examples")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


class SecretFreeSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, leaving out the defaults that may be secrets."""

    def model_field_schema(self, schema: core_schema.ModelField) -> JsonSchemaValue:
        return _unless_excluded(schema, super().model_field_schema(schema))

    def dataclass_field_schema(self, schema: core_schema.DataclassField) -> JsonSchemaValue:
        return _unless_excluded(schema, super().dataclass_field_schema(schema))

    def typed_dict_field_schema(self, schema: core_schema.TypedDictField) -> JsonSchemaValue:
        return _unless_excluded(schema, super().typed_dict_field_schema(schema))

    def generate(self, schema: core_schema.CoreSchema, mode: Any = "validation") -> JsonSchemaValue:
        json_schema = super().generate(schema, mode=mode)
        _scrub(json_schema)
        return json_schema


def _unless_excluded(field: Any, json_schema: JsonSchemaValue) -> JsonSchemaValue:
    if field.get("serialization_exclude"):
        _hide(json_schema)
    return json_schema


def _scrub(node: Any) -> None:
    """Leave out the secret defaults of every property under ``node``."""
    if isinstance(node, list):
        for item in node:
            _scrub(item)
        return
    if not isinstance(node, dict):
        return
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, prop in properties.items():
            if isinstance(prop, dict) and _is_secret(name, prop):
                _hide(prop)
    for value in node.values():
        _scrub(value)


def _is_secret(name: str, prop: dict[str, Any]) -> bool:
    title = prop.get("title")
    return (
        names_a_credential(name)
        or (isinstance(title, str) and names_a_credential(title))
        or _write_only(prop)
        or any(_holds_credentials(prop[k]) for k in HIDDEN_KEYWORDS if k in prop)
    )


def names_a_credential(name: str) -> bool:
    """Whether a field's name says it holds a credential (``api_key``, ``clientSecret``)."""
    words = [w.lower() for w in _WORD.findall(name)]
    joined = "".join(words)
    if joined in CREDENTIAL_WORDS or any(w in CREDENTIAL_WORDS for w in words):
        return True
    return any(pair in CREDENTIAL_PAIRS for pair in pairwise(words))


def _write_only(node: Any) -> bool:
    """A ``writeOnly`` schema (pydantic's secret types) anywhere in ``node``."""
    if isinstance(node, dict):
        return node.get("writeOnly") is True or any(
            _write_only(v) for k, v in node.items() if k not in HIDDEN_KEYWORDS
        )
    return isinstance(node, list) and any(_write_only(v) for v in node)


def _holds_credentials(value: Any) -> bool:
    """A URL with credentials, or a key named as a credential, anywhere in ``value``."""
    if isinstance(value, str):
        return redact(value) != value
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and names_a_credential(k)) or _holds_credentials(v)
            for k, v in value.items()
        )
    return isinstance(value, list) and any(_holds_credentials(v) for v in value)


def _hide(prop: JsonSchemaValue) -> None:
    for keyword in HIDDEN_KEYWORDS:
        prop.pop(keyword, None)
