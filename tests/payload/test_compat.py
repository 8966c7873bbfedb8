"""``streamq compat OLD NEW`` over two AsyncAPI documents of a service: each breaking
change with its type, field and why; exit 1 when there is one, 0 otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from streamq import App, Message, MessageQueue
from streamq.asyncapi import asyncapi_document
from streamq.payload.compat import breaking_changes
from tests.helpers.cli import streamq

from .helpers import v1_to_v2

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "asyncapi-3.0.0.schema.json").read_text())


class Order(BaseModel):
    id: int
    client: str
    note: str = ""


class Email(BaseModel):
    to: str


def document(order: type[BaseModel], *, emails: bool = True, **versions: Any) -> dict[str, Any]:
    mq = MessageQueue(stream="orders", group="billing")

    @mq.handler("order", model=order, **versions)
    async def handle(msg: Message[Any]) -> None: ...

    if emails:
        mq.publisher("email", Email)
    doc = asyncapi_document(App(mq, name="shop"))
    jsonschema.validate(doc, SCHEMA)
    return doc


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [str(change) for change in breaking_changes(old, new)]


def test_documents_carry_each_types_version_and_upcasts() -> None:
    class OrderV2(BaseModel):
        id: int
        customer: str

    message = document(OrderV2, version=2, upcast={1: v1_to_v2})["components"]["messages"]
    assert (message["order"]["x-streamq-version"], message["order"]["x-streamq-upcast-from"]) == (
        2,
        [1],
    )
    assert message["email"]["x-streamq-version"] == 1


def test_an_unchanged_or_compatible_model_has_no_breaking_change() -> None:
    class Roomier(BaseModel):  # a new optional field, a removed optional one
        id: int
        client: str
        city: str | None = None

    assert changes(document(Order), document(Order)) == []
    assert changes(document(Order), document(Roomier)) == []


def test_each_breaking_change_is_named_with_its_type_field_and_why() -> None:
    class Broken(BaseModel):
        id: str  # retyped
        currency: str  # new, required, no default
        note: str  # now required

    assert changes(document(Order), document(Broken, emails=False)) == [
        "email: type removed: its entries find no handler",
        "order.id: retyped from integer to string",
        "order.client: removed, and the old model requires it",
        "order.currency: new required field without a default: entries written before lack it",
        "order.note: now required, without a default: entries written before lack it",
    ]


def test_a_version_bump_needs_an_upcast_from_the_old_version() -> None:
    class OrderV2(BaseModel):
        id: int
        customer: str

    old = document(Order)
    assert changes(old, document(OrderV2, version=2, upcast={1: v1_to_v2})) == []
    assert changes(old, document(OrderV2, version=2)) == [
        "order: version 1 -> 2 without an upcast from version 1: give upcast={1: ...}"
    ]
    assert changes(document(OrderV2, version=2), old) == [
        "order: version goes down from 2 to 1: entries of version 2 wait for a consumer that "
        "knows it"
    ]


@pytest.mark.slow
def test_the_command_exits_1_on_a_breaking_change_and_0_otherwise(tmp_path: Path) -> None:
    class OrderV2(BaseModel):
        id: int
        customer: str

    old, same, broken = tmp_path / "old.json", tmp_path / "same.json", tmp_path / "new.json"
    old.write_text(json.dumps(document(Order)))
    same.write_text(json.dumps(document(Order)))
    broken.write_text(json.dumps(document(OrderV2, version=2)))
    ok = streamq("compat", str(old), str(same), url=None)
    assert (ok.returncode, ok.stdout) == (0, "no breaking change\n")
    bad = streamq("compat", str(old), str(broken), url=None)
    assert bad.returncode == 1, bad.stderr
    assert (
        bad.stdout
        == "order: version 1 -> 2 without an upcast from version 1: give upcast={1: ...}\n"
    )
    missing = streamq("compat", str(old), str(tmp_path / "nope.json"), url=None)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
