"""``streamq tail`` shows a compressed payload decompressed and an encrypted one as such
(its steps and key ID, never its bytes; encrypted meta values too), with
``enc``/``kid``/``ver`` as they are."""

from __future__ import annotations

import base64
import json

import pytest

from tests.helpers.cli import streamq
from tests.helpers.queues import QueueFactory

from .helpers import BIG, KEY1, KEY2, keyring, keyring_variable

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_tail_decompresses_and_shows_encrypted_payloads_as_such(
    make_queue: QueueFactory, redis_url: str, stream: str
) -> None:
    zipped = make_queue(compression="zstd", compress_over=10)
    sealed = make_queue(encryption=keyring(), encrypt_meta=["email"])
    async with zipped, sealed:
        await zipped.publish("job", BIG)
        await sealed.publish("job", {"card": "4111"}, meta={"email": "ada@x.org", "lang": "fr"})
    done = streamq("tail", stream, "--from", "0", "--count", "2", url=redis_url)
    assert done.returncode == 0, done.stderr
    first, second = map(json.loads, done.stdout.splitlines())
    assert first["data"] == BIG and first["other_fields"] == {"enc": "zstd"}
    assert second["data"] is None and second["encrypted"] == "aesgcm with key 'k1'"
    # an encrypted meta value is shown as such too, not as its ciphertext
    assert second["meta"] == {"email": "<encrypted with key 'k1'>", "lang": "fr"}, second
    assert "4111" not in done.stdout and "aesgcm:" not in done.stdout


async def test_tail_decrypts_data_and_meta_with_the_keyring_of_a_variable(
    make_queue: QueueFactory, redis_url: str, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed = make_queue(compression="zstd", compress_over=10, encryption=keyring(),
                        encrypt_meta=["email"])  # fmt: skip
    async with sealed:
        await sealed.publish("job", BIG, meta={"email": "ada@example.org", "plain": "yes"})
    variable = keyring_variable(monkeypatch)
    done = streamq("tail", stream, "--from", "0", "--count", "1", "--keyring-env", variable,
                   url=redis_url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout)
    assert line["data"] == BIG and line["meta"] == {"email": "ada@example.org", "plain": "yes"}
    assert line["other_fields"] == {"enc": "zstd+aesgcm", "kid": "k1"}
    assert base64.b64encode(KEY1).decode() not in done.stdout + done.stderr
    wrong = keyring_variable(monkeypatch, "k2", k2=KEY2)
    done = streamq("tail", stream, "--from", "0", "--count", "1", "--keyring-env", wrong,
                   url=redis_url)  # fmt: skip
    line = json.loads(done.stdout)
    assert line["data"] is None
    assert line["data_error"] == "cannot decode (aesgcm): key ID 'k1' is not in this keyring (k2)"


@pytest.mark.parametrize("command", [["tail", "{}", "--count", "1"], ["dlq", "list", "{}"]])
async def test_a_keyring_variable_that_holds_none_is_a_usage_error(
    redis_url: str, stream: str, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("SQ_TEST_KEYRING", '{"current": "k1", "keys": {"k1": "c2VjcmV0"}}')
    args = [arg.format(stream) for arg in command]
    done = streamq(*args, "--keyring-env", "SQ_TEST_KEYRING", url=redis_url)
    assert done.returncode == 2, done.stderr
    assert "key 'k1' is 6 bytes long: AES-GCM takes 16, 24 or 32 bytes" in done.stderr
    assert "c2VjcmV0" not in done.stderr + done.stdout
