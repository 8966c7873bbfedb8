"""The service that `make demo-service` runs with `streamq run demos.service_app:app`.

Two queues in one App: orders (group ``billing``) and emails (group ``mailer``). No URL:
every worker, the publisher and the demo reach the one shared embedded server (or
``$STREAMQ_REDIS_URL``). Each handler records what it did in a Redis hash, so the demo can
check from outside that nothing was lost and who handled what.
"""

from __future__ import annotations

import logging
import os

import anyio
import redis.asyncio as aioredis

from handlers.email_handler import Email
from handlers.order_handler import Order
from streamq import App, Message, MessageQueue, StartFrom

PREFIX = os.environ.get("DEMO_PREFIX", "demo-service")
ORDERS, EMAILS = f"{PREFIX}-orders", f"{PREFIX}-emails"
DONE = f"{PREFIX}:done"  # hash: entry id -> "<consumer> <what>"
log = logging.getLogger("demo.service")

# Small capacity and slow handlers, so that a worker always has entries in hand.
orders = MessageQueue(stream=ORDERS, group="billing", consumer="billing", start=StartFrom.EARLIEST,
                      concurrency=2, max_in_flight=4, read_count=2, claim_idle=60, grace=5)  # fmt: skip
emails = MessageQueue(stream=EMAILS, group="mailer", consumer="mailer", start=StartFrom.EARLIEST,
                      concurrency=2, max_in_flight=4, read_count=2, claim_idle=60, grace=5)  # fmt: skip
_clients: list[aioredis.Redis] = []


def store() -> aioredis.Redis:
    if not _clients:
        _clients.append(aioredis.Redis.from_url(orders.url, decode_responses=True))
    return _clients[0]


@orders.handler("order")
async def bill(msg: Message[Order]) -> None:
    await anyio.sleep(0.15)  # the payment provider
    log.info("billed %s for %s", msg.data.customer, msg.data.amount)
    await store().hset(DONE, msg.id, f"{orders.consumer} order {msg.data.order_id}")


@emails.handler("email")
async def send(msg: Message[Email]) -> None:
    await anyio.sleep(0.1)  # the mail server
    await store().hset(DONE, msg.id, f"{emails.consumer} email {msg.data.to}")


app = App(orders, emails, name="shop")
