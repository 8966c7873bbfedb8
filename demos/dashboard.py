"""`make demo-dashboard`: the dashboard over live traffic, until Ctrl-C.

Two topics: orders (group ``billing`` keeps up, group ``audit`` is slow and falls behind
in bursts; negative amounts fail and end as dead letters, one order is stopped) and emails
(group ``mailer``; newsletters are rejected). Open the printed address, watch the lag
chart, log in with the printed token and replay or purge the dead letters.

``--seconds N`` stops by itself after N seconds; ``--port 0`` picks a free port. The demo
topics are terminated at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
from contextlib import AsyncExitStack
from typing import Any

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from streamq import Message, MessageQueue, Reject, RetryPolicy, ServerUnavailableError, StartFrom
from streamq.dashboard import create_app
from streamq.dashboard.app import LOOPBACK_HOSTS
from streamq.dashboard.security import new_token
from streamq.dashboard.server import bind, url_of, uvicorn_server

RETRY = RetryPolicy(attempts=2, backoff=0.05, max_deliveries=2)
SETTINGS: dict[str, Any] = dict(start=StartFrom.EARLIEST, retry=RETRY, claim_idle=2.0)


def consumers(orders: str, emails: str) -> list[MessageQueue]:
    billing = MessageQueue(stream=orders, group="billing", consumer="billing-1", **SETTINGS)
    audit = MessageQueue(stream=orders, group="audit", consumer="audit-1", concurrency=1,
                         **SETTINGS)  # fmt: skip
    mailer = MessageQueue(stream=emails, group="mailer", consumer="mailer-1", **SETTINGS)

    @billing.handler("order")
    async def charge(msg: Message[dict[str, int]]) -> None:
        await anyio.sleep(0.002)
        if msg.data["amount"] < 0:
            raise ValueError(f"cannot charge a negative amount: {msg.data['amount']}")

    @audit.handler("order")
    async def record(msg: Message[dict[str, int]]) -> None:
        await anyio.sleep(0.04)  # one at a time: ~25 orders/s, slower than the bursts

    @mailer.handler("welcome")
    async def send(msg: Message[str]) -> None:
        await anyio.sleep(0.01)

    @mailer.handler("newsletter")
    async def refuse(msg: Message[str]) -> None:
        raise Reject(f"newsletters are switched off (to {msg.data})")

    return [billing, audit, mailer]


async def produce(orders: MessageQueue, emails: MessageQueue) -> None:
    """Orders at a varying rate with a burst every ~15 s (audit drains it between bursts);
    a few emails a second."""
    tick = 0
    while True:
        tick += 1
        count = 150 if tick % 30 == 0 else random.randint(0, 12)
        amounts = [random.randint(1, 500) if random.random() > 0.03 else -1 for _ in range(count)]
        if amounts:
            await orders.publish_many("order", [{"amount": a} for a in amounts])
        kind = "newsletter" if tick % 7 == 0 else "welcome"
        await emails.publish(kind, f"user{tick}@example.com")
        await anyio.sleep(0.5)


async def main(seconds: float | None, port: int) -> None:
    setup_logging()
    if "STREAMQ_LOG" not in os.environ:  # the failures are on the dashboard, not here
        logging.getLogger("streamq").setLevel(logging.CRITICAL)
    orders, emails = fresh_stream("orders"), fresh_stream("emails")
    queues = consumers(orders, emails)
    url = queues[0].url
    token = new_token()
    server = uvicorn_server(
        create_app(url, token=token, allowed_hosts=LOOPBACK_HOSTS), handle_signals=False
    )
    sock = listen(port)
    print(f"streamq dashboard demo on {where()}")
    print(f"topics {orders} (groups billing, audit) and {emails} (group mailer)")
    print(f"open {url_of(sock)}  (write token: {token})", flush=True)
    print(
        "failures are logged with STREAMQ_LOG=WARNING; "
        + ("Ctrl-C to stop" if seconds is None else f"stopping after {seconds:g}s"),
        flush=True,
    )
    async with AsyncExitStack() as stack:
        for mq in queues:
            await stack.enter_async_context(mq.running())
        stopped = await queues[0].publish("order", {"amount": 99})
        await queues[0].stop_message(stopped)
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, queues[0], queues[2])
            tg.start_soon(stop_after, server, seconds)
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    await summary_and_cleanup(queues[0], queues[2])


def listen(port: int) -> Any:
    try:
        return bind("127.0.0.1", port)
    except OSError:  # the usual port is taken: any free one will do
        return bind("127.0.0.1", 0)


async def stop_after(server: Any, seconds: float | None) -> None:
    """Stop the server after ``seconds`` (Ctrl-C or SIGTERM cancel the whole demo: see
    ``demos._common.run``)."""
    if seconds is None:
        return
    await anyio.sleep(seconds)
    server.should_exit = True


async def summary_and_cleanup(orders: MessageQueue, emails: MessageQueue) -> None:
    try:
        async with orders, emails:  # running() closed them; reopen to read and clean up
            for mq in (orders, emails):
                info = await mq.topic_info()
                print(f"{mq.stream}: {info.length} entries, {info.dead_letters} dead letters")
                await mq.terminate_topic()
    except ServerUnavailableError:
        # Ctrl-C in a terminal reaches the embedded server too (it is in the same process
        # group): it is gone, and the demo topics with it.
        print("dashboard stopped; the server is gone, and the demo topics with it")
        return
    print("dashboard stopped; demo topics terminated")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--port", type=int, default=8700, help="0 picks a free port")
    options = parser.parse_args()
    run(main, options.seconds, options.port)
