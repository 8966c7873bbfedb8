"""The main demonstration (`make demo`): publish emails and orders, consume them with the
example handlers, including an entry written by a foreign producer and a bad one, then
print what happened and exit 0."""

from __future__ import annotations

import textwrap
from decimal import Decimal

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from handlers.email_handler import Email, install
from handlers.order_handler import Order, OrderHandler
from streamq import MessageQueue, StartFrom


async def main() -> None:
    setup_logging()
    stream = fresh_stream("main")
    mq = MessageQueue(stream=stream, group="demo", consumer="demo-1", start=StartFrom.EARLIEST)
    outbox: list[Email] = []
    install(mq, outbox)
    orders = OrderHandler()
    mq.register(orders)
    print(f"streamq demo on {where()}, stream {stream!r}")

    async with mq:
        await mq.publish("email", Email(to="ada@example.com", subject="Welcome"))
        await mq.publish_many(
            "order",
            [
                Order(order_id=f"o-{i}", customer=("ada", "bob")[i % 2], amount=Decimal(10 * i))
                for i in range(1, 7)
            ],
            meta={"source": "demo"},
        )
        # A foreign producer, as with redis-cli: XADD <stream> * type email data '{...}'
        await mq.client.xadd(
            stream, {"type": "email", "data": '{"to":"cli@example.com","subject":"from redis-cli"}'}
        )
        # A payload that fails the model: dead-lettered with the reason, nothing lost.
        await mq.client.xadd(stream, {"type": "email", "data": '{"to":"not-an-address"}'})
        expected_emails, expected_orders = 2, 6

        print("handling:")
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            with anyio.fail_after(30):
                while len(outbox) < expected_emails or len(orders.handled) < expected_orders:
                    await anyio.sleep(0.05)
                while (await mq.topic_info()).dead_letters < 1:
                    await anyio.sleep(0.05)
            await mq.stop()

        info = await mq.topic_info()
        print("result:")
        print(f"  emails sent: {len(outbox)}; orders handled: {len(orders.handled)}")
        print(f"  totals per customer: { {k: str(v) for k, v in sorted(orders.totals.items())} }")
        for letter in await mq.dead_letters():
            # The whole reason: a cut one can end in the middle of the pattern it quotes.
            print(f"  dead letter {letter.original_id} ({letter.error_type}):")
            print(textwrap.indent(letter.error, "    "))
        print(f"  pending: {info.pending}; stopped by: {mq.stop_reason} (auto: {mq.auto_stopped})")
        await mq.terminate_topic()


if __name__ == "__main__":
    run(main)
