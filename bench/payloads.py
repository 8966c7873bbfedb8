"""Payload figures (docs/guides/payloads.md); ``python -m bench.payloads`` runs them alone,
``make bench`` with the others.

The workload: order events of about 10 KB of JSON each (a customer with two addresses, 21
line items with names, URLs, short descriptions, prices and attributes, a status history),
generated from a fixed seed out of a small vocabulary, IDs and numbers: JSON that
compresses as business events do (zstd takes it to about a quarter), not random bytes.
A case is, in one round: ``publish_many`` of the orders (timed), the server memory the
stream then takes (``MEMORY USAGE ... SAMPLES 0``), and one consumer with a handler of
the ``Order`` model draining the stream (timed, every entry acked). Every case is compared
with the plain case (no compression, no encryption) of the same round.

* ``payload_publish_zstd`` / ``payload_consume_zstd`` / ``payload_memory_zstd``:
  ``compression="zstd"``, as ratios of the plain case (``ratio_to_plain``).
* ``payload_publish_aesgcm`` / ``payload_consume_aesgcm``: ``encryption=Keyring(...)``
  alone; ``payload_*_zstd_aesgcm``: both.
* Each throughput figure also gives the CPU time both processes (this one and the
  server) spent per message (``cpu_us_per_msg``) and ``cpu_ratio_to_plain``, the plain
  case's CPU time over this one's (above 1 is better, as for throughput): on a shared
  machine the wall clock swings with the neighbours' load, CPU time much less.
* ``payload_consume_upcast``: the workload's 100-byte ``email`` entries written as version
  1 and read by a handler of version 2 with one upcast step (a renamed field), as a ratio
  of the same handler reading entries of version 2 (``ratio_to_no_upcast``), and of the
  usual path, a handler without versions reading entries without ``ver``
  (``ratio_to_unversioned``).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import anyio
from pydantic import BaseModel

from streamq import Keyring, Message, MessageQueue
from streamq.message import encode_entry

from .workload import (
    Email,
    figures_cli,
    fresh_stream,
    payload,
    queue,
    server_cpu,
    xadd_pipeline,
)

Emit = Any
_VOCABULARY = (
    "blue green red black white steel oak cotton linen wool leather glass ceramic "
    "small large medium compact heavy light premium classic modern vintage outdoor "
    "indoor kitchen garden office travel sport winter summer chair table lamp shelf "
    "desk bottle kettle jacket boot glove scarf bag case cable charger adapter stand "
    "with for and the a of in by from set pack kit edition series model warranty "
    "delivery shipping returns included handmade recycled organic waterproof wireless"
)
WORDS = tuple(_VOCABULARY.split())
STATUSES = ("paid", "packed", "shipped", "delivered")
CITIES = ("Lyon", "Porto", "Leeds", "Graz", "Ghent", "Turku", "Brno", "Bergen")
COLOURS = ("black", "white", "blue", "green", "red", "grey", "natural")
SIZES = ("XS", "S", "M", "L", "XL", "one size")
WAREHOUSES = ("FR-LYS-1", "PT-OPO-2", "DE-HAM-1")


class Address(BaseModel):
    name: str
    street: str
    city: str
    postcode: str
    country: str


class Customer(BaseModel):
    id: int
    email: str
    shipping: Address
    billing: Address


class Item(BaseModel):
    sku: str
    name: str
    url: str
    image_url: str
    description: str
    quantity: int
    unit_price: float
    currency: str
    tax_rate: float
    discount: float
    warehouse: str
    attributes: dict[str, str]
    gift_wrap: bool


class Event(BaseModel):
    at: str
    status: str
    by: str


class Order(BaseModel):
    id: str
    created_at: str
    status: str
    customer: Customer
    items: list[Item]
    history: list[Event]
    total: float
    currency: str
    notes: str | None


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _time(rng: random.Random) -> str:
    return (
        f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}.{rng.randrange(1000):03d}Z"
    )


def _address(rng: random.Random) -> Address:
    return Address(
        name=_words(rng, 2).title(),
        street=f"{rng.randint(1, 300)} {_words(rng, 2).title()} Street",
        city=rng.choice(CITIES), postcode=f"{rng.randrange(10**5):05d}", country="EU",
    )  # fmt: skip


def _item(rng: random.Random) -> Item:
    product = rng.randrange(10**6)
    return Item(
        sku=f"SKU-{product:06d}", name=_words(rng, 3).title(),
        url=f"https://shop.example.com/products/{product:06d}",
        image_url=f"https://cdn.example.com/images/products/{product:06d}/main-800x800.jpg",
        description=_words(rng, 10), quantity=rng.randint(1, 5),
        unit_price=round(rng.uniform(2, 400), 2), currency="EUR", tax_rate=0.2,
        discount=rng.choice((0.0, 0.0, 0.05, 0.1)), warehouse=rng.choice(WAREHOUSES),
        attributes={"colour": rng.choice(COLOURS), "size": rng.choice(SIZES),
                    "material": rng.choice(WORDS[:12])},
        gift_wrap=rng.random() < 0.1,
    )  # fmt: skip


def order(i: int) -> Order:
    """An order event of about 10 KB of JSON, the same for the same ``i``."""
    rng = random.Random(i)
    items = [_item(rng) for _ in range(21)]
    history = [Event(at=_time(rng), status=status, by=f"svc-{status}") for status in STATUSES]
    customer = Customer(id=rng.randrange(10**7), email=f"user{i}@example.com",
                        shipping=_address(rng), billing=_address(rng))  # fmt: skip
    return Order(
        id=f"{rng.getrandbits(128):032x}", created_at=_time(rng), status=rng.choice(STATUSES),
        customer=customer, items=items, history=history,
        total=round(sum(it.unit_price * it.quantity for it in items), 2), currency="EUR",
        notes=_words(rng, 12) if rng.random() < 0.3 else None,
    )  # fmt: skip


KEYRING = Keyring({"bench": Keyring.generate_key()}, current="bench")
CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "zstd": {"compression": "zstd", "compress_over": 1024},
    "aesgcm": {"encryption": KEYRING},
    "zstd_aesgcm": {"compression": "zstd", "compress_over": 1024, "encryption": KEYRING},
}


def _stop_after(mq: MessageQueue, total: int) -> None:
    count = 0

    @mq.handler("order")
    async def handle(msg: Message[Order]) -> None:
        nonlocal count
        count += 1
        if count == total:
            await mq.stop()


class Clock:
    """Wall-clock time and CPU time, this process's and the server's, over a block: on a
    shared machine the wall clock swings with the neighbours' load, CPU time much less."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def start(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.server = await server_cpu(self.client)

    async def rates(self, n: int) -> tuple[float, float]:
        """Messages per second, and microseconds of CPU (both processes) per message."""
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu + await server_cpu(self.client) - self.server
        return n / wall, cpu / n * 1e6


async def one_case(url: str, orders: list[Order], settings: dict[str, Any]) -> dict[str, float]:
    """Publish ``orders`` (timed), the stream's memory, then consume them all (timed)."""
    n = len(orders)
    mq = queue(url, fresh_stream("payload"), **settings)
    _stop_after(mq, n)
    async with mq:
        clock = Clock(mq.client)
        await clock.start()
        await mq.publish_many("order", orders)
        publish, publish_cpu = await clock.rates(n)
        memory = await mq.client.memory_usage(mq.stream, samples=0)
        await clock.start()
        await mq.run(handle_signals=False)  # returns after the final ack flush
        consume, consume_cpu = await clock.rates(n)
        assert (await mq.topic_info()).pending == 0, "bench consumer left entries pending"
        await mq.client.delete(mq.stream)
    return {"publish": publish, "consume": consume, "memory": float(memory or 0),
            "publish_cpu": publish_cpu, "consume_cpu": consume_cpu}  # fmt: skip


def v1_email(i: int) -> dict[str, Any]:
    """The workload's email as version 1 wrote it: ``address`` became ``to`` in version 2."""
    fields = payload(i).model_dump()
    fields["address"] = fields.pop("to")
    return fields


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    data["to"] = data.pop("address")
    return data


async def consume_versions(url: str, n: int, written: int, handler: int) -> tuple[float, float]:
    """Entries of version ``written`` read by a handler of version ``handler``."""
    old = written < handler  # written by version 1, where ``to`` was ``address``
    rows = [encode_entry("email", v1_email(i) if old else payload(i)) for i in range(n)]
    if written != 1:
        for fields in rows:
            fields[b"ver"] = str(written)
    mq = queue(url, fresh_stream("upcast"))
    for start in range(0, n, 2000):  # plain pipelined XADD, as an older publisher wrote them
        await xadd_pipeline(mq.client, mq.stream, rows[start : start + 2000]).execute()
    count = 0
    upcast = {1: v1_to_v2} if handler == 2 else None

    @mq.handler("email", version=handler, upcast=upcast)
    async def handle(msg: Message[Email]) -> None:
        nonlocal count
        count += 1
        if count == n:
            await mq.stop()

    async with mq:
        clock = Clock(mq.client)
        await clock.start()
        with anyio.fail_after(300):  # an entry dead-lettered would leave the count short
            await mq.run(handle_signals=False)
        rates = await clock.rates(n)
        assert count == n and (await mq.topic_info()).pending == 0
        await mq.client.delete(mq.stream)
    return rates


def _ratio(rates: list[float], yardstick: list[float]) -> float:
    return round(statistics.median(r / y for r, y in zip(rates, yardstick, strict=True)), 3)


async def codec_figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    n = 2000 if quick else 10_000
    orders = [order(i) for i in range(n)]
    size = statistics.mean(len(o.model_dump_json()) for o in orders[:100])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
    for settings in CASES.values():  # not timed: what the first use of each loads or builds
        await one_case(url, orders[:200], settings)
    for _ in range(rounds):  # interleaved: the machine's drift hits every case alike
        for name, settings in CASES.items():
            runs[name].append(await one_case(url, orders, settings))
    plain = runs["plain"]
    for name in CASES:
        for what in ("publish", "consume"):
            rates, yardstick = [run[what] for run in runs[name]], [p[what] for p in plain]
            cpu = [run[f"{what}_cpu"] for run in runs[name]]
            # CPU: the plain case's time over this one's, so that above 1 is better too
            cpu_ratio = _ratio([p[f"{what}_cpu"] for p in plain], cpu)
            emit(bench=f"payload_{what}_{name}", msgs=n, payload_bytes=round(size),
                 msgs_per_s=round(max(rates)), ratio_to_plain=_ratio(rates, yardstick),
                 cpu_us_per_msg=round(statistics.median(cpu), 1), cpu_ratio_to_plain=cpu_ratio,
                 runs=[round(r) for r in rates])  # fmt: skip
        memory = [run["memory"] for run in runs[name]]
        emit(bench=f"payload_memory_{name}", msgs=n, payload_bytes=round(size),
             bytes_per_msg=round(statistics.median(memory) / n),
             ratio_to_plain=_ratio(memory, [p["memory"] for p in plain]))  # fmt: skip


async def upcast_figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    n = 10_000 if quick else 50_000
    cases = {"unversioned": (1, 1), "no_upcast": (2, 2), "upcast": (1, 2)}
    rates: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for written, handler in cases.values():  # not timed: warming up
        await consume_versions(url, 1000, written, handler)
    for _ in range(rounds):
        for name, (written, handler) in cases.items():
            rate, cpu_us = await consume_versions(url, n, written, handler)
            rates[name].append(rate)
            cpu[name].append(cpu_us)
    emit(bench="payload_consume_upcast", msgs=n, msgs_per_s=round(max(rates["upcast"])),
         ratio_to_no_upcast=_ratio(rates["upcast"], rates["no_upcast"]),
         ratio_to_unversioned=_ratio(rates["upcast"], rates["unversioned"]),
         cpu_us_per_msg=round(statistics.median(cpu["upcast"]), 1),
         cpu_ratio_to_no_upcast=_ratio(cpu["no_upcast"], cpu["upcast"]),
         cpu_ratio_to_unversioned=_ratio(cpu["unversioned"], cpu["upcast"]),
         runs=[round(r) for r in rates["upcast"]],
         runs_no_upcast=[round(r) for r in rates["no_upcast"]],
         runs_unversioned=[round(r) for r in rates["unversioned"]])  # fmt: skip


async def figures(url: str, quick: bool, rounds: int, emit: Emit) -> None:
    await codec_figures(url, quick, rounds, emit)
    await upcast_figures(url, quick, rounds, emit)


if __name__ == "__main__":
    figures_cli("streamq payload benchmarks (JSON lines)", figures)
