"""``streamq compat OLD NEW`` over two AsyncAPI documents of a service: each breaking
change with its type, field and why; exit 1 when there is one, 0 otherwise."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, create_model

from streamq import App, Message, MessageQueue
from streamq._asyncapi import asyncapi_document
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


class Address(BaseModel):
    zip: int
    city: str


class ShippingAddress(BaseModel):  # Address's shape under another name
    zip: int
    city: str


class Line(BaseModel):
    sku: str
    qty: int


class Tree(BaseModel):  # a recursive model
    name: str
    children: list[Tree] = []


def shipped(address: type[BaseModel], line: type[BaseModel] = Line) -> type[BaseModel]:
    class Shipped(BaseModel):
        id: int
        address: address  # type: ignore[valid-type]
        billing: address | None = None  # type: ignore[valid-type]
        lines: list[line]  # type: ignore[valid-type]
        tree: Tree | None = None

    return Shipped


def test_fields_of_nested_models_are_compared_by_their_dotted_path() -> None:
    class NewAddress(BaseModel):
        zip: str  # retyped
        country: str  # new, required, no default
        city: str

    class NewLine(BaseModel):
        sku: str
        qty: float  # retyped

    assert changes(document(shipped(Address)), document(shipped(NewAddress, NewLine))) == [
        "order.address.zip: retyped from integer to string",
        "order.address.country: new required field without a default: entries written "
        "before lack it",
        "order.billing.zip: retyped from integer to string",
        "order.billing.country: new required field without a default: entries written "
        "before lack it",
        "order.lines[].qty: retyped from integer to number",
    ]


def test_a_nested_model_renamed_with_the_same_shape_is_no_breaking_change() -> None:
    assert changes(document(shipped(Address)), document(shipped(ShippingAddress))) == []


def test_a_recursive_model_is_compared_once_per_level() -> None:
    class Node(BaseModel):
        name: int  # Tree.name retyped
        children: list[Node] = []

    class Rooted(BaseModel):
        tree: Tree

    class Renode(BaseModel):
        tree: Node

    assert changes(document(Rooted), document(Renode)) == [
        "order.tree.name: retyped from string to integer"
    ]


def test_a_payload_that_is_not_an_object_is_compared_by_its_type() -> None:
    def counts(payload: Any) -> dict[str, Any]:
        mq = MessageQueue(stream="orders", group="billing")

        @mq.handler("count")
        async def handle(msg: Message[payload]) -> None: ...

        return asyncapi_document(App(mq, name="shop"))

    assert changes(counts(int), counts(int)) == []
    assert changes(counts(int), counts(str)) == ["count: payload retyped from integer to string"]
    assert changes(counts(list[int]), counts(list[str])) == [
        "count: payload retyped from array of integer to array of string"
    ]
    assert changes(counts(list[Line]), counts(list[ShippingAddress])) == [
        "count[].sku: removed, and the old model requires it",
        "count[].qty: removed, and the old model requires it",
        "count[].zip: new required field without a default: entries written before lack it",
        "count[].city: new required field without a default: entries written before lack it",
    ]
    assert changes(counts(dict[str, Line]), counts(dict[str, ShippingAddress]))[0] == (
        "count[*].sku: removed, and the old model requires it"
    )
    assert changes(counts(Line), counts(int)) == ["count: payload retyped from object to integer"]


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class FewerColours(enum.Enum):
    RED = "red"


class MoreColours(enum.Enum):
    RED = "red"
    BLUE = "blue"
    GREEN = "green"


def test_a_change_of_the_values_a_field_allows_is_a_breaking_change() -> None:
    """An enum or a Literal that loses a value refuses entries written before; one that
    gains a value is refused by the consumers still running the old model."""

    def paint(colour: Any, size: Any = str) -> dict[str, Any]:
        model = create_model("Paint", colour=(colour, ...), size=(size, "s"))
        return document(model, emails=False)

    assert changes(paint(Colour), paint(Colour)) == []
    assert changes(paint(Colour), paint(FewerColours)) == [
        "order.colour: value 'blue' no longer allowed: entries written before may hold it"
    ]
    assert changes(paint(Colour), paint(MoreColours)) == [
        "order.colour: value 'green' added: consumers still running the old model refuse it"
    ]
    assert changes(paint(str, Literal["s", "m"]), paint(str, Literal["s"])) == [
        "order.size: value 'm' no longer allowed: entries written before may hold it"
    ]
    assert changes(paint(str, str), paint(str, Literal["s", "m"])) == [
        "order.size: now only 's', 'm': entries written before may hold other values"
    ]
    assert changes(paint(str, Literal["s", "m"]), paint(str, str)) == [
        "order.size: no longer only 's', 'm': consumers still running the old model refuse "
        "other values"
    ]
    assert changes(paint(str, Literal["s", "m"]), paint(str, Literal["m", "l", "xl"])) == [
        "order.size: value 's' no longer allowed: entries written before may hold it; values "
        "'l', 'xl' added: consumers still running the old model refuse them"
    ]
    assert changes(paint(Colour | None), paint(FewerColours | None)) == [
        "order.colour: value 'blue' no longer allowed: entries written before may hold it"
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
