"""``streamq tail`` shows a compressed payload decompressed and an encrypted one as such
(its steps and key ID, never its bytes), with ``enc``/``kid``/``ver`` as they are."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import streamq
from tests.helpers.queues import QueueFactory

from .helpers import BIG, keyring

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_tail_decompresses_and_shows_encrypted_payloads_as_such(
    make_queue: QueueFactory, redis_url: str, stream: str
) -> None:
    zipped = make_queue(compression="zstd", compress_over=10)
    sealed = make_queue(encryption=keyring())
    async with zipped, sealed:
        await zipped.publish("job", BIG)
        await sealed.publish("job", {"card": "4111"})
    done = streamq("tail", stream, "--from", "0", "--count", "2", url=redis_url)
    assert done.returncode == 0, done.stderr
    first, second = map(json.loads, done.stdout.splitlines())
    assert first["data"] == BIG and first["other_fields"] == {"enc": "zstd"}
    assert second["data"] is None and second["encrypted"] == "aesgcm with key 'k1'"
    assert "4111" not in done.stdout
