"""Issue 27 item 6: the decode paths fuzzed, with tracing on and off, for single and batch
handlers. Entries are written raw with XADD by a seeded generator (reproducible: the seed
is in the test's name): nesting deeper than any parser goes, huge fields, invalid UTF-8,
JSON of the wrong kinds, bad or missing types, odd field names. Every entry must end
handled or dead-lettered with a reason, nothing left pending, the consumer never crashes,
within a bounded time."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, RetryPolicy, tracing
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

Fields = dict[bytes, bytes]
JOB = b"job"


def deep(rng: random.Random) -> bytes:
    depth = rng.choice([300, 5_000, 100_000])
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def junk(rng: random.Random, size: int) -> bytes:
    """Bytes that are mostly not UTF-8 (lone continuation bytes, surrogates, NUL)."""
    pool = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\x00", b"{", b'"', b"a"]
    return b"".join(rng.choice(pool) for _ in range(size))


def huge(rng: random.Random) -> bytes:
    return b'"' + b"x" * rng.choice([1 << 20, 3 << 20]) + b'"'


def data_field(rng: random.Random) -> bytes | None:
    fields: list[Callable[[], bytes | None]] = [
        lambda: b"1",
        lambda: b'{"n": 1, "s": "\xc3\xa9"}',
        lambda: deep(rng),
        lambda: huge(rng),
        lambda: junk(rng, rng.randint(1, 64)),
        lambda: b"not json",
        lambda: b"",
        lambda: b'"\\ud800"',  # a lone surrogate, escaped: valid JSON, not valid text
        lambda: b"[1",
        lambda: None,  # no data field
    ]
    return rng.choice(fields)()


def meta_field(rng: random.Random) -> bytes | None:
    parent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    fields: list[Callable[[], bytes | None]] = [
        lambda: None,
        lambda: b'{"k": "v"}',
        lambda: b'{"traceparent": "' + parent + b'"}',
        lambda: b'{"traceparent": 5, "tracestate": ["a"]}',
        lambda: b'{"traceparent": "garbage", "baggage": "=;=;"}',
        lambda: b'{"traceparent": ' + deep(rng) + b"}",
        lambda: deep(rng),
        lambda: b'["traceparent", "x"]',
        lambda: b'{"k": null, "n": 1, "o": {}}',
        lambda: b'"a string"',
        lambda: junk(rng, rng.randint(1, 64)),
        lambda: b'{"k": "' + b"v" * (1 << 20) + b'"}',
    ]
    return rng.choice(fields)()


def type_field(rng: random.Random) -> bytes | None:
    return rng.choice(
        [JOB, JOB, JOB, None, b"", b"x" * 129, b"bad type!", b"job\x00", junk(rng, 8), b"jo\xffb"]
    )


def entry(rng: random.Random) -> Fields:
    fields: Fields = {}
    for name, value in ((b"type", type_field(rng)), (b"data", data_field(rng))):
        if value is not None:
            fields[name] = value
    meta = meta_field(rng)
    if meta is not None:
        fields[b"meta"] = meta
    if rng.random() < 0.2:  # a field name that is not text, or a huge one
        fields[rng.choice([junk(rng, 6), b"k" * 70_000, b"\x00"])] = junk(rng, 10)
    return fields or {b"only": b"this"}


def well_formed(fields: Fields) -> bool:
    """Entries the generator made of good parts only: these must be handled."""
    data, meta = fields.get(b"data", b""), fields.get(b"meta")
    good_data = data in (b"1", b'{"n": 1, "s": "\xc3\xa9"}') or data.startswith(b'"xxx')
    good_meta = meta is None or meta.startswith((b'{"k": "v', b'{"traceparent": "'))
    return fields.get(b"type") == JOB and good_data and good_meta


def entries(seed: int, count: int) -> list[Fields]:
    rng = random.Random(seed)
    made = [entry(rng) for _ in range(count)]
    # at most a few huge fields per run: the point is their shape, not the machine's memory
    big = [i for i, f in enumerate(made) if sum(map(len, f.values())) > 500_000]
    for i in big[4:]:
        made[i] = {b"type": JOB, b"data": b"1"}
    return made


@contextmanager
def traced_consumers() -> Iterator[None]:
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()  # spans made and ended, exported nowhere
    tracing.set_tracer_provider(provider)
    try:
        yield
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()


def tracing_on(traced: bool) -> Callable[[], Any]:
    if traced:
        pytest.importorskip("opentelemetry.sdk.trace", reason="tracing on needs the OTel SDK")
        return traced_consumers
    return nullcontext


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.timeout(120)
async def test_every_fuzzed_entry_ends_handled_or_dead_lettered_with_a_reason(
    make_queue: QueueFactory,
    client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
    seed: int,
    batch: bool,
    traced: bool,
) -> None:
    caplog.set_level(logging.ERROR, logger="streamq")
    with tracing_on(traced)():
        mq = make_queue(
            retry=RetryPolicy(attempts=1, max_deliveries=2, unknown_type_deliveries=1),
            concurrency=8,
        )
        handled: list[str] = []

        def keep(msg: Message[Any]) -> None:
            if msg.data == "fail":  # a handler failure among the bad input
                raise ValueError("fails every time")
            handled.append(msg.id)

        def keep_all(msgs: list[Message[Any]]) -> None:
            for msg in msgs:
                keep(msg)

        if batch:
            mq.batch_handler("job", size=16, timeout=0.05)(keep_all)
        else:
            mq.handler("job")(keep)
        async with mq:
            made = [*entries(seed, 120), {b"type": JOB, b"data": b'"fail"'}]
            ids = [(await client.xadd(mq.stream, fields)).decode() for fields in made]

            async def settled() -> bool:
                return len(handled) + int(mq.stats()["dead_lettered"]) >= len(ids)

            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    await tg.start(mq.run)
                    await wait_for(settled, timeout=80, what="every entry settled")
                    await mq.stop()
            letters = {d.original_id: d for d in await mq.dead_letters(count=1000)}
            pending = (await client.xpending(mq.stream, "g"))["pending"]
    assert mq.stop_reason == "stopped", "the consumer never crashed"
    assert pending == 0, "nothing left pending"
    assert not set(handled) & set(letters), "no entry both handled and dead-lettered"
    assert set(handled) | set(letters) == set(ids), "every entry ended one way or the other"
    assert all(letter.error for letter in letters.values()), "each dead letter has a reason"
    assert "fails every time" in letters[ids[-1]].error
    good = {i for i, fields in zip(ids, made, strict=True) if well_formed(fields)}
    assert len(good) > 5 and good <= set(handled), "well-formed entries are handled"
    escaped = [r.getMessage() for r in caplog.records if r.name != "streamq.topic.deadletter"]
    assert escaped == [], "nothing escaped an entry's own outcome"
