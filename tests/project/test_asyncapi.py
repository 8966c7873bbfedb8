"""`streamq asyncapi`: the AsyncAPI 3.0 document of a queue or App, valid against the
official JSON Schema (tests/data, shipped: the tests fetch nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from streamq import App, MessageQueue
from streamq._asyncapi import asyncapi_document

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "asyncapi-3.0.0.schema.json").read_text())

SERVICE = """
from decimal import Decimal
from typing import Any
from pydantic import BaseModel
from streamq import App, Message, MessageQueue


class Address(BaseModel):
    street: str
    city: str


class Order(BaseModel):
    order_id: str
    amount: Decimal
    ship_to: Address


class Email(BaseModel):
    to: str


orders = MessageQueue("redis://svc:s3cret@db.example:6390/2", stream="orders",
                      group="billing", partitions=4)
emails = MessageQueue("redis://db.example:6390/2", stream="emails", group="mailer")


@orders.batch_handler("order", size=10)
async def store(msgs: list[Message[Order]]) -> None: ...


@emails.handler("email")
async def send(msg: Message[Email]) -> None: ...


@emails.handler("raw")
async def raw(msg: Message[Any]) -> None: ...


app = App(orders, emails, name="shop")
"""


def asyncapi(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamq.cli", "asyncapi", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def service(tmp_path: Path) -> Path:
    (tmp_path / "shop.py").write_text(SERVICE)
    return tmp_path


@pytest.mark.slow
def test_the_document_of_an_app_is_valid_asyncapi_3(service: Path) -> None:
    result = asyncapi("shop:app", cwd=service)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["asyncapi"] == "3.0.0" and document["info"]["title"] == "shop"
    assert "s3cret" not in result.stdout and "svc" not in json.dumps(document["servers"])
    assert list(document["servers"].values()) == [
        {"host": "db.example:6390", "protocol": "redis", "pathname": "/2"}
    ]
    orders, emails = document["channels"]["orders"], document["channels"]["emails"]
    assert orders["address"] == "orders" and "4 streams" in orders["description"]
    assert set(orders["messages"]) == {"order"} and set(emails["messages"]) == {"email", "raw"}
    receive = {k: v for k, v in document["operations"].items() if v["action"] == "receive"}
    assert len(receive) == 3
    assert any("in batches" in op["summary"] for op in receive.values())
    schemas = document["components"]["schemas"]
    order = schemas["Order"]
    assert order["properties"]["ship_to"] == {"$ref": "#/components/schemas/Address"}
    assert set(schemas) >= {"Order", "Address", "Email"}
    assert document["components"]["messages"]["raw"]["payload"] == {"description": "any JSON value"}


@pytest.mark.slow
def test_yaml_and_output_file(service: Path) -> None:
    out = service / "api.yaml"
    result = asyncapi("shop:emails", "--yaml", "--output", str(out), cwd=service)
    assert result.returncode == 0 and result.stdout == "", result.stderr
    document = yaml.safe_load(out.read_text())
    jsonschema.validate(document, SCHEMA)
    assert set(document["channels"]) == {"emails"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "says"),
    [
        (
            "shop:Email",
            "expected a MessageQueue or App (or a function returning one), got the class shop.Email",
        ),
        ("shop:nothing", "'shop' has no attribute 'nothing'"),
        ("nosuch:app", "cannot import 'nosuch'"),
    ],
)
def test_a_target_that_is_not_a_queue_or_app_is_one_line_exit_2(
    service: Path, target: str, says: str
) -> None:
    result = asyncapi(target, cwd=service)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr


def test_a_queue_on_the_default_server_has_no_server_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STREAMQ_REDIS_URL", raising=False)
    mq = MessageQueue(stream="bare", group="g")

    @mq.handler("ping")
    async def ping(msg: Any) -> None: ...

    document = asyncapi_document(App(mq))
    jsonschema.validate(document, SCHEMA)
    assert "servers" not in document and "servers" not in document["channels"]["bare"]


@pytest.mark.slow
def test_the_dashboard_serves_and_links_the_document(
    service: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`streamq dashboard --asyncapi shop:app`: every page links /asyncapi.json, which is
    the document `streamq asyncapi` prints; without --asyncapi there is no link and a 404."""
    pytest.importorskip("starlette")
    import httpx

    from streamq.cli.dashboard import _asyncapi_of
    from streamq.dashboard import create_app
    from tests.helpers.dashboard import serving

    monkeypatch.chdir(service)
    document = _asyncapi_of("shop:app")
    assert document is not None
    with serving(create_app(redis_url, token=None, asyncapi=document)) as base:
        page = httpx.get(base + "/", timeout=30).text
        served = httpx.get(base + "/asyncapi.json", timeout=30)
    assert 'href="/asyncapi.json"' in page
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(document))
    jsonschema.validate(served.json(), SCHEMA)
    with serving(create_app(redis_url, token=None)) as base:
        assert 'href="/asyncapi.json"' not in httpx.get(base + "/", timeout=30).text
        assert httpx.get(base + "/asyncapi.json", timeout=30).status_code == 404


@pytest.mark.slow
def test_a_dashboard_asyncapi_target_that_cannot_load_is_one_line_exit_2(
    service: Path, redis_url: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--url", redis_url, "--port", "0",
         "--asyncapi", "shop:Email"],
        cwd=service, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "expected a MessageQueue or App" in lines[0] and "got the class shop.Email" in lines[0]


SECRET_DEFAULTS = [
    "ak-0001",
    "pw-0002",
    "dbpw-0003",
    "hidden-0004",
    "cs-0005",
    "tok-0006",
    "pk-0007",
    "basic-0008",
    "nested-0009",
]


def _model_with_secret_defaults() -> Any:
    from pydantic import BaseModel, Field, SecretBytes, SecretStr

    class OAuth(BaseModel):
        client_id: str = "visible-client"
        client_secret: str = "cs-0005"
        accessToken: str = "tok-0006"  # a foreign payload's camelCase

    class Deep(BaseModel):
        oauth: OAuth = OAuth()
        items: list[dict[str, str]] = [{"password": "nested-0009"}]

    class Settings(BaseModel):
        api_key: str = "ak-0001"
        password: str = "pw-0002"
        db_url: str = "postgresql://app:dbpw-0003@db:5432/app"
        internal: str = Field(default="hidden-0004", exclude=True)
        private_key: str = "pk-0007"
        basic_auth: str = "basic-0008"
        signing: SecretStr = SecretStr("sig")
        blob: SecretBytes | None = None
        deep: Deep = Deep()
        region: str = "eu-west-1"
        author: str = "visible-author"
        max_tokens: int = 512

    return Settings


def _defaults(node: Any, path: str = "") -> dict[str, Any]:
    """Every ``default`` of the document, by where it is."""
    found: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "default":
                found[path] = value
            found |= _defaults(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found |= _defaults(value, f"{path}/{i}")
    return found


def test_default_values_that_may_be_secrets_are_left_out_at_any_depth() -> None:
    mq = MessageQueue("redis://db.example:6390/2", stream="settings", group="g")
    mq.publisher("settings", _model_with_secret_defaults())
    document = asyncapi_document(App(mq, name="svc"))
    jsonschema.validate(document, SCHEMA)
    text = json.dumps(document)
    assert not [s for s in SECRET_DEFAULTS if s in text], text
    defaults = _defaults(document["components"]["schemas"])
    shown = {path.rsplit("/", 1)[-1]: value for path, value in defaults.items()}
    assert shown["region"] == "eu-west-1" and shown["author"] == "visible-author"
    assert shown["max_tokens"] == 512 and shown["client_id"] == "visible-client"
    for hidden in ("api_key", "password", "db_url", "internal", "signing", "deep", "oauth"):
        assert hidden not in shown, (hidden, shown[hidden])


@pytest.mark.slow
def test_a_file_it_cannot_write_is_one_line_not_the_server_unreachable(service: Path) -> None:
    result = asyncapi("shop:app", "-o", str(service / "no-such-dir" / "api.json"), cwd=service)
    assert result.returncode == 1, (result.returncode, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("streamq: cannot write ") and "No such file" in line, line
