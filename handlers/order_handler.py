"""Orders, handled by an object (``message_type`` + ``handle`` + ``handle_batch``)."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, Field

from streamq import Message


class Order(BaseModel):
    order_id: str
    customer: str
    amount: Decimal = Field(ge=0)
    items: list[str] = []


class OrderHandler:
    """Keeps a running total per customer. Registered with ``mq.register(OrderHandler())``."""

    message_type = "order"

    def __init__(self) -> None:
        self.totals: dict[str, Decimal] = {}
        self.handled: list[str] = []

    async def handle(self, msg: Message[Order]) -> None:
        order = msg.data
        self.totals[order.customer] = self.totals.get(order.customer, Decimal(0)) + order.amount
        self.handled.append(order.order_id)
        print(f"  order  {msg.id}  {order.order_id} {order.customer:<8} {order.amount:>8}")


class OrderBatchHandler(OrderHandler):
    """The same, in batches: one call per batch of orders."""

    batch_size = 10
    batch_timeout = 0.2

    async def handle_batch(self, msgs: list[Message[Order]]) -> None:
        for msg in msgs:
            order = msg.data
            total = self.totals.get(order.customer, Decimal(0))
            self.totals[order.customer] = total + order.amount
            self.handled.append(order.order_id)
        print(f"  order batch of {len(msgs)}: {msgs[0].data.order_id} .. {msgs[-1].data.order_id}")
