"""Compression and encryption round trips against the real server: what publishing writes
(text fields any Redis client reads), and what any consumer, whatever its own settings,
decodes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import Publisher
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

from .helpers import BIG, KEY1, KEY2, keeping, keyring

pytestmark = pytest.mark.anyio


async def _raw(client: aioredis.Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _id, fields in await client.xrange(stream)]


async def _handled(make_queue: QueueFactory, n: int, **options: Any) -> list[Any]:
    """The messages a plain consumer (or one with ``options``) is given for the first ``n``
    entries of the stream."""
    consumer = make_queue(**options)
    handled = keeping(consumer)
    async with consumer.running():
        await wait_for(lambda: len(handled) == n, what=f"{n} messages handled")
    return handled


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
async def test_data_over_the_threshold_is_compressed_and_any_consumer_reads_it(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, compression: Any
) -> None:
    mq = make_queue(compression=compression, compress_over=1024)
    async with mq:
        await mq.publish("job", BIG, meta={"m": "v"})
        await mq.publish("job", {"small": 1})
    big, small = await _raw(client, stream)
    assert big[b"enc"] == compression.encode()
    packed = base64.b64decode(big[b"data"], validate=True)  # text, as every field
    assert len(packed) < 0.4 * len(json.dumps(BIG))
    assert b"enc" not in small and json.loads(small[b"data"]) == {"small": 1}
    first, second = await _handled(make_queue, 2)  # a consumer without compression=
    assert first.data == BIG and first.meta == {"m": "v"} and second.data == {"small": 1}


async def test_publish_many_and_typed_publishers_compress_too(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue(compression="gzip", compress_over=10)
    async with mq:
        await mq.publish_many("job", [BIG, BIG])
    assert [f[b"enc"] for f in await _raw(client, stream)] == [b"gzip", b"gzip"]
    assert [m.data for m in await _handled(make_queue, 2)] == [BIG, BIG]


@pytest.mark.parametrize("blocking", [False, True])
async def test_publish_many_compresses_its_items_together_each_in_its_place(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, redis_url: str,
    blocking: bool,
) -> None:  # fmt: skip
    """zstd compresses a publish_many's payloads in one call on several threads: each entry
    gets its own data back, in order; small ones go as they are; encryption applies after
    the compression, entry by entry."""
    items: list[Any] = [
        {"n": i, "rows": [f"row {i}-{j}" for j in range(80)]} if i % 3 else {"small": i}
        for i in range(30)
    ]
    settings: dict[str, Any] = dict(compression="zstd", compress_over=200, encryption=keyring())
    if blocking:
        with Publisher(redis_url, stream=stream, **settings) as publisher:
            publisher.publish_many("job", items)
    else:
        async with make_queue(**settings) as mq:
            await mq.publish_many("job", items)
    encs = [f.get(b"enc") for f in await _raw(client, stream)]
    assert encs == [b"aesgcm" if i % 3 == 0 else b"zstd+aesgcm" for i in range(30)]
    handled = await _handled(make_queue, 30, encryption=keyring())
    assert [m.data for m in handled] == items


async def test_encrypted_data_and_listed_meta_are_unreadable_in_redis_and_decrypted(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue(
        compression="zstd", compress_over=100, encryption=keyring(), encrypt_meta=["ssn"]
    )
    async with mq:
        await mq.publish("job", BIG, meta={"ssn": "123-45-6789", "lang": "fr"})
        await mq.publish("job", {"card": "4111"})
    big, small = await _raw(client, stream)
    assert (big[b"enc"], big[b"kid"], small[b"enc"]) == (b"zstd+aesgcm", b"k1", b"aesgcm")
    assert b"4111" not in small[b"data"] and b"customer" not in big[b"data"]
    meta = json.loads(big[b"meta"])
    assert meta["lang"] == "fr" and meta["ssn"].startswith("aesgcm:")
    assert "123-45-6789" not in big[b"meta"].decode()
    first, second = await _handled(make_queue, 2, encryption=keyring())
    assert first.data == BIG and first.meta == {"ssn": "123-45-6789", "lang": "fr"}
    assert second.data == {"card": "4111"}


async def test_after_rotation_old_entries_decrypt_with_the_old_key_and_new_ones_use_the_new(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    before = make_queue(encryption=keyring("k1", k1=KEY1))
    after = make_queue(encryption=keyring("k2", k2=KEY2, k1=KEY1))
    async with before, after:
        await before.publish("job", {"n": 1})
        await after.publish("job", {"n": 2})
    assert [f[b"kid"] for f in await _raw(client, stream)] == [b"k1", b"k2"]
    handled = await _handled(make_queue, 2, encryption=keyring("k2", k2=KEY2, k1=KEY1))
    assert [m.data for m in handled] == [{"n": 1}, {"n": 2}]


async def test_the_blocking_publisher_and_scheduled_messages_encode_as_the_queue_does(
    make_queue: QueueFactory, redis_url: str, client: aioredis.Redis, stream: str
) -> None:
    with Publisher(redis_url, stream, compression="zstd", compress_over=10,
                   encryption=keyring()) as publisher:  # fmt: skip
        publisher.publish("job", BIG)
        publisher.publish_many("job", [{"n": 1}])
    mq = make_queue(encryption=keyring())
    async with mq:
        await mq.publish("job", {"n": 2}, delay=0.01)
    handled = await _handled(make_queue, 3, encryption=keyring())
    assert [m.data for m in handled] == [BIG, {"n": 1}, {"n": 2}]
    assert {f[b"enc"] for f in await _raw(client, stream)} == {b"zstd+aesgcm", b"aesgcm"}
