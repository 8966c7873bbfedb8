"""Dead letters keep ``enc``, ``kid`` and ``ver`` as written, and a replay by a queue with a
keyring encrypts again with its current key, so that an old key can be retired."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from streamq import Message, Reject
from streamq.payload.wire import aad
from tests.helpers.cli import streamq
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

from .helpers import (
    BIG,
    KEY1,
    KEY2,
    ONE_DELIVERY,
    dead_letters,
    keeping,
    keyring,
    keyring_variable,
)

pytestmark = pytest.mark.anyio


async def test_a_replay_reencrypts_with_the_current_key_and_keeps_the_rest(
    make_queue: QueueFactory, client: aioredis.Redis, stream: str
) -> None:
    old = make_queue(retry=ONE_DELIVERY, compression="zstd", compress_over=10,
                     encryption=keyring("k1", k1=KEY1), encrypt_meta=["ssn"])  # fmt: skip

    @old.handler("job", version=2, upcast={1: lambda d: d})
    async def refuse(msg: Message[Any]) -> None:
        raise Reject("not now")

    async with old:
        await old.publish("job", BIG, meta={"ssn": "123"})
        async with old.running():
            await dead_letters(old, 1)
        ((_id, letter),) = await client.xrange(old.dead_letter_queue.key)
    assert (letter[b"enc"], letter[b"kid"], letter[b"ver"]) == (b"zstd+aesgcm", b"k1", b"2")

    rotated = keyring("k2", k2=KEY2, k1=KEY1)
    new = make_queue(encryption=rotated)
    handled = keeping(new, version=2, upcast={1: lambda d: d})
    async with new:
        (new_id,) = await new.replay_dead_letter()
        ((_id, replayed),) = await client.xrange(stream, min=new_id, max=new_id)
        assert (replayed[b"enc"], replayed[b"kid"], replayed[b"ver"]) == (
            b"zstd+aesgcm",
            b"k2",
            b"2",
        )
        meta = json.loads(replayed[b"meta"])
        assert meta["ssn"].startswith("aesgcm:") and meta["replayed_from"]
        async with new.running():
            await wait_for(lambda: len(handled) == 1, what="the replayed entry handled")
    assert handled[0].data == BIG and handled[0].meta["ssn"] == "123"
    # a group with only the new key: the replayed entry decrypts, the original does not
    only_new = make_queue(group="other", retry=ONE_DELIVERY, encryption=keyring("k2", k2=KEY2))
    seen = keeping(only_new, version=2, upcast={1: lambda d: d})
    async with only_new:
        async with only_new.running():
            await wait_for(lambda: len(seen) == 1, what="the replayed entry seen")
            await dead_letters(only_new, 1)
        (letter_k1,) = await only_new.dead_letters()
    assert seen[0].data == BIG
    assert "key ID 'k1' is not in this keyring (k2)" in letter_k1.error


async def test_the_cli_checks_and_replays_encrypted_dead_letters_with_a_keyring(
    make_queue: QueueFactory,
    client: aioredis.Redis,
    redis_url: str,
    stream: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = make_queue(retry=ONE_DELIVERY, encryption=keyring("k1", k1=KEY1))

    @old.handler("job")
    async def refuse(msg: Message[Any]) -> None:
        raise Reject("not now")

    async with old:
        await old.publish("job", {"card": "4111"})
        async with old.running():
            await dead_letters(old, 1)
    listed = streamq("dlq", "list", stream, url=redis_url)
    assert listed.returncode == 0, listed.stderr
    assert "payload: aesgcm with key 'k1' (encrypted: give --keyring-env" in listed.stdout
    variable = keyring_variable(monkeypatch, "k2", k2=KEY2, k1=KEY1)
    listed = streamq("dlq", "list", stream, "--keyring-env", variable, url=redis_url)
    assert "payload: aesgcm with key 'k1': decodes with this keyring" in listed.stdout
    assert "4111" not in listed.stdout
    replayed = streamq("dlq", "replay", stream, "--keyring-env", variable, url=redis_url)
    assert replayed.returncode == 0 and replayed.stdout.startswith("replayed 1:"), replayed.stderr
    new_id = replayed.stdout.split()[-1]
    ((_id, fields),) = await client.xrange(stream, min=new_id, max=new_id)
    assert fields[b"kid"] == b"k2"
    sealed = base64.b64decode(fields[b"data"])
    assert json.loads(keyring("k2", k2=KEY2).decrypt("k2", sealed, aad(b"job", "data"))) == {
        "card": "4111"
    }
