"""`make demo-batch`: emails sent in batches of 5, orders one by one, in one consumer."""

from __future__ import annotations

import anyio

from demos._common import fresh_stream, run, setup_logging, where
from handlers.email_handler import Email
from handlers.order_handler import OrderHandler
from streamq import Message, MessageQueue, StartFrom


async def main() -> None:
    setup_logging()
    mq = MessageQueue(stream=fresh_stream("batch"), group="demo", start=StartFrom.EARLIEST)
    sizes: list[int] = []

    @mq.batch_handler("email", size=5, timeout=0.3)
    async def send_emails(msgs: list[Message[Email]]) -> None:
        sizes.append(len(msgs))
        print(f"  batch of {len(msgs)} emails: {', '.join(m.data.to for m in msgs)}")

    orders = OrderHandler()
    mq.register(orders)  # no batch handler for orders: they go one by one
    print(f"batch demo on {where()}")
    async with mq:
        await mq.publish_many(
            "email", [Email(to=f"user{i}@example.com", subject="hi") for i in range(12)]
        )
        await mq.publish("order", {"order_id": "o-1", "customer": "ada", "amount": "9.99"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            with anyio.fail_after(20):
                while sum(sizes) < 12 or not orders.handled:
                    await anyio.sleep(0.05)
            await mq.stop()
        print(f"batch sizes seen: {sizes} (12 emails: two full batches of 5, then 2 on timeout)")
        await mq.terminate_topic()


if __name__ == "__main__":
    run(main)
