"""Every payload that cannot be decoded, written by hand as any Redis client could, is
dead-lettered with a reason naming the entry's version and the step that failed, and
the letter keeps the entry's fields as they were: nothing crashes, nothing is lost."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import pytest
import redis.asyncio as aioredis
import zstandard

from tests.helpers.queues import QueueFactory

from .helpers import KEY1, ONE_DELIVERY, OrderV3, dead_letters, keeping, keyring, v2_to_v3

pytestmark = pytest.mark.anyio

JSON = b'{"id": 1, "client": "ada"}'


def b64(raw: bytes) -> bytes:
    return base64.b64encode(raw)


def sealed(plain: bytes, kid: str = "k1", type_name: bytes = b"job") -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aad = b"streamq\x00" + type_name + b"\x00data"
    return b"0" * 12 + AESGCM(KEY1).encrypt(b"0" * 12, plain, aad)


ZSTD = zstandard.ZstdCompressor().compress(JSON * 50)

BAD: dict[str, tuple[dict[str, bytes], str]] = {
    "unknown enc": (
        {"enc": b"lz4", "data": b64(JSON)},
        "entry version 1, step 'enc' failed: unknown encoding 'lz4'",
    ),
    "enc not base64": (
        {"enc": b"gzip", "data": b"{not base64}"},
        "entry version 1, step 'base64' failed",
    ),
    "truncated zstd": (
        {"enc": b"zstd", "data": b64(ZSTD[:-7])},
        "entry version 1, step 'zstd' failed",
    ),
    "corrupted gzip": (
        {"enc": b"gzip", "data": b64(gzip.compress(JSON)[:12] + b"garbage!")},
        "entry version 1, step 'gzip' failed",
    ),
    "truncated gzip": (
        {"enc": b"gzip", "data": b64(gzip.compress(JSON)[:-5])},
        "entry version 1, step 'gzip' failed: truncated",
    ),
    "unknown kid": (
        {"enc": b"aesgcm", "kid": b"k9", "data": b64(sealed(JSON))},
        "step 'aesgcm' failed: key ID 'k9' is not in this keyring",
    ),
    "failed tag": (
        {"enc": b"aesgcm", "kid": b"k1", "data": b64(sealed(JSON)[:-1] + b"x")},
        "step 'aesgcm' failed: authentication failed with key 'k1'",
    ),
    "another type's ciphertext": (
        {"enc": b"aesgcm", "kid": b"k1", "data": b64(sealed(JSON, type_name=b"other"))},
        "step 'aesgcm' failed: authentication failed",
    ),
    "encrypted without kid": (
        {"enc": b"aesgcm", "data": b64(sealed(JSON))},
        "step 'aesgcm' failed: the entry is encrypted but has no kid",
    ),
    "ver not a number": (
        {"ver": b"two", "data": JSON},
        "entry unknown version, step 'ver' failed: ver 'two' is not a positive integer",
    ),
    "ver zero": (
        {"ver": b"0", "data": JSON},
        "step 'ver' failed: ver '0' is not a positive integer",
    ),
    "ver negative": (
        {"ver": b"-1", "data": JSON},
        "step 'ver' failed: ver '-1' is not a positive integer",
    ),
    "ver older than the oldest upcast": ({"ver": b"1", "data": JSON}, "OLDEST"),
}


@pytest.mark.parametrize("case", BAD)
async def test_an_undecodable_payload_is_dead_lettered_with_its_version_and_step(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, case: str
) -> None:
    fields, reason = BAD[case]
    oldest = reason == "OLDEST"
    mq = make_queue(retry=ONE_DELIVERY, encryption=keyring())
    handled = keeping(mq, version=3 if oldest else 1, upcast={2: v2_to_v3} if oldest else None)
    await client.xadd(stream, {"type": "job", **fields})
    async with mq:
        async with mq.running():
            await dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
        ((_id, kept),) = await client.xrange(mq.dead_letter_queue.key)
    expected = (
        "entry version 1, step 'ver' failed: version 1 is older than the oldest this "
        "handler upcasts from (2)" if oldest else reason
    )  # fmt: skip
    assert letter.error.startswith("invalid payload for 'job': PayloadError: ")
    assert expected in letter.error, letter.error
    assert not handled
    for name, value in fields.items():  # the letter keeps every field as it was
        assert kept[name.encode()] == value


async def test_an_encrypted_entry_with_no_keyring_here_is_dead_lettered_saying_so(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue(retry=ONE_DELIVERY)
    keeping(mq)
    await client.xadd(
        stream, {"type": "job", "enc": "aesgcm", "kid": "k1", "data": b64(sealed(JSON))}
    )
    async with mq:
        async with mq.running():
            await dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert (
        "step 'aesgcm' failed: encrypted with key 'k1', and no keyring was given here"
        in letter.error
    )


def _raises(data: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("client")


@pytest.mark.parametrize(
    ("upcast", "expected"),
    [
        (
            {1: _raises, 2: v2_to_v3},
            "entry version 1, step 'upcast 1->2' failed: KeyError: 'client'",
        ),
        (
            {1: lambda d: {"id": "not an int"}, 2: v2_to_v3},
            "entry version 1, step 'validation' failed: the model refused it once upcast to version 3",
        ),
        ({1: lambda d: None, 2: v2_to_v3}, "entry version 1, step 'upcast 2->3' failed: TypeError"),
    ],
)
async def test_an_upcast_that_raises_or_returns_what_the_model_refuses_dead_letters(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str, upcast: Any, expected: str
) -> None:
    mq = make_queue(retry=ONE_DELIVERY)
    handled = keeping(mq, "order", version=3, upcast=upcast, model=OrderV3)
    await client.xadd(stream, {"type": "order", "data": JSON})
    async with mq:
        async with mq.running():
            await dead_letters(mq, 1)
        (letter,) = await mq.dead_letters()
    assert expected in letter.error, letter.error
    assert not handled


async def test_bad_entries_do_not_hold_up_good_ones(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    mq = make_queue(retry=ONE_DELIVERY, encryption=keyring())
    handled = keeping(mq)
    for fields, _reason in BAD.values():
        await client.xadd(stream, {"type": "job", **fields})
    await client.xadd(stream, {"type": "job", "data": b'{"fine": true}'})
    async with mq.running():
        await dead_letters(mq, len(BAD) - 1)  # version 1 is fine for a version-1 handler
    assert [m.data for m in handled] == [{"id": 1, "client": "ada"}, {"fine": True}]
