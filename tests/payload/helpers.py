"""What the payload tests share: keys, a model with its versions, and a queue that keeps
what it handles."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pydantic import BaseModel

from streamq import Keyring, Message, MessageQueue, RetryPolicy
from tests.helpers.waiting import wait_for

KEY1, KEY2 = b"1" * 32, b"2" * 32
ONE_DELIVERY = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
BIG = {"rows": [{"name": f"customer {i}", "city": "Lyon", "total": i * 3} for i in range(200)]}


def keyring(current: str = "k1", **keys: bytes) -> Keyring:
    return Keyring(keys or {"k1": KEY1}, current=current)


def keyring_variable(monkeypatch: pytest.MonkeyPatch, current: str = "k1", **keys: bytes) -> str:
    """Set $SQ_TEST_KEYRING (which the `streamq` command inherits) to a keyring of ``keys``."""
    text = {kid: base64.b64encode(key).decode() for kid, key in (keys or {"k1": KEY1}).items()}
    monkeypatch.setenv("SQ_TEST_KEYRING", json.dumps({"current": current, "keys": text}))
    return "SQ_TEST_KEYRING"


class OrderV3(BaseModel):
    id: int
    customer: str
    currency: str


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {"id": data["id"], "customer": data["client"]}


def v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "currency": "EUR"}


def keeping(mq: MessageQueue, message_type: str = "job", **options: Any) -> list[Message[Any]]:
    """A handler of ``message_type`` on ``mq`` keeping each message it is given."""
    handled: list[Message[Any]] = []

    @mq.handler(message_type, **options)
    async def keep(msg: Message[Any]) -> None:
        handled.append(msg)

    return handled


async def dead_letters(mq: MessageQueue, n: int) -> None:
    async def enough() -> bool:
        return (await mq.topic_info()).dead_letters >= n

    await wait_for(enough, what=f"{n} dead letters")
