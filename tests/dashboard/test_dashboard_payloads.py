"""Encoded payloads on the dashboard's dead-letter page (over HTTP): a compressed ``data``
shown decompressed; an encrypted one shown as such (encoding and key ID, none of its
bytes) unless the dashboard has a keyring, which decrypts it and its encrypted ``meta``
values and re-encrypts a replay with its current key; what cannot be decoded says why. No
key appears on a page. In a real browser: test_dashboard_browser.py; the
``--keyring-env`` option of ``streamq dashboard``: at the end."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")
pytest.importorskip("cryptography", reason="the payload tests need the [crypto] extra")

from streamq import Keyring
from streamq.payload.encoding import PayloadCodec
from streamq.wire.keys import Keys
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import dashboard_client, log_in, make_dead_letters, visible_text
from tests.payload.helpers import BIG, KEY1, KEY2

SECRETS = (base64.b64encode(KEY1).decode(), base64.b64encode(KEY2).decode(), KEY1.decode())


def sealed_letters(url: str, stream: str) -> None:
    """Two dead letters: one zstd-compressed (its consumer failed on it), one encrypted
    with key k1, with an encrypted meta value (written as a consumer without the key
    dead-letters it: its reason names no part of the payload)."""
    make_dead_letters(url, stream, [BIG], compression="zstd", compress_over=10)
    codec = PayloadCodec(encryption=Keyring({"k1": KEY1}, "k1"), encrypt_meta=["email"])
    fields = codec.entry("pay", {"card": "4111-1111"}, meta={"email": "ada@example.org"})
    fields.update(error="key ID 'k1' is not in this keyring", original_id="1-1")
    with sync_client(url, stream) as r:
        r.xadd(Keys(stream).dead_letters, fields)


@pytest.fixture
def plain_web(redis_url: str) -> Iterator[httpx.Client]:
    with dashboard_client(redis_url) as client:
        yield client


@pytest.fixture
def keyed_web(redis_url: str) -> Iterator[httpx.Client]:
    ring = Keyring({"k1": KEY1, "k2": KEY2}, current="k2")
    with dashboard_client(redis_url, keyring=ring) as client:
        yield client


def test_without_a_keyring_compressed_is_decoded_and_encrypted_shown_as_such(
    plain_web: httpx.Client, redis_url: str, stream: str
) -> None:
    sealed_letters(redis_url, stream)
    page = plain_web.get("/topic/dead-letters", params={"stream": stream}).text
    text = visible_text(page)
    assert "stored zstd: shown decoded" in text
    assert json.dumps(BIG["rows"][199], separators=(",", ":")) in text
    assert "stored aesgcm with key 'k1'" in text
    assert "Encrypted: this dashboard has no keyring" in text
    assert "<encrypted with key 'k1'>" in text, "an encrypted meta value is shown as such"
    assert "4111" not in page and "ada@" not in page and "aesgcm:" not in page
    assert not any(secret in page for secret in SECRETS)


def test_with_a_keyring_data_and_meta_are_decrypted_and_a_replay_reencrypts(
    keyed_web: httpx.Client, redis_url: str, stream: str, r: redis.Redis
) -> None:
    sealed_letters(redis_url, stream)
    page = keyed_web.get("/topic/dead-letters", params={"stream": stream}).text
    text = visible_text(page)
    assert "stored aesgcm with key 'k1': shown decoded" in text
    assert '{"card":"4111-1111"}' in text and "Encrypted:" not in text
    assert '{"email":"ada@example.org"}' in text
    assert not any(secret in page for secret in SECRETS)
    csrf = log_in(keyed_web)
    keyed_web.post("/topic/dead-letters/replay-all", data={"csrf": csrf, "stream": stream})
    replayed = [fields for _, fields in r.xrange(stream) if fields[b"type"] == b"pay"][-1]
    assert replayed[b"kid"] == b"k2" and r.xlen(Keys(stream).dead_letters) == 0
    data = Keyring({"k2": KEY2}, "k2").decrypt("k2", base64.b64decode(replayed[b"data"]),
                                                b"streamq\x00pay\x00data")  # fmt: skip
    assert json.loads(data) == {"card": "4111-1111"}


def test_what_cannot_be_decoded_says_why(
    keyed_web: httpx.Client, r: redis.Redis, stream: str
) -> None:
    r.xadd(stream, {"type": "job", "data": "1"})
    r.xgroup_create(stream, "g", id="0")
    letters = Keys(stream).dead_letters
    r.xadd(letters, {"type": "job", "data": base64.b64encode(b"not zstd"), "enc": "zstd"})
    r.xadd(letters, {"type": "job", "data": "eA==", "enc": "lz4"})
    r.xadd(letters, {"type": "job", "data": "A" * 60, "enc": "aesgcm", "kid": "k9"})
    r.xadd(letters, {"type": "job", "data": "A" * 30_000, "enc": "zstd"})
    text = visible_text(keyed_web.get("/topic/dead-letters", params={"stream": stream}).text)
    assert "cannot decode (zstd): not valid zstd data" in text
    assert "cannot decode (enc): unknown encoding 'lz4'" in text
    assert "cannot decode (aesgcm): key ID 'k9' is not in this keyring (k1, k2)" in text
    assert "30000 bytes as stored: too long to decode here" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "environment variable SQ_TEST_KEYRING is not set"),
        ('{"current": "k1", "keys": {"k1": "' + SECRETS[0], "SQ_TEST_KEYRING is not JSON"),
    ],
)
def test_the_command_refuses_a_keyring_variable_without_showing_it(
    redis_url: str, value: str | None, said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SQ_TEST_KEYRING"}
    if value is not None:
        env["SQ_TEST_KEYRING"] = value
    done = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--url", redis_url, "--port", "0",
         "--keyring-env", "SQ_TEST_KEYRING"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert SECRETS[0] not in done.stderr + done.stdout


@pytest.mark.slow
def test_the_command_decrypts_with_the_keyring_of_a_variable(redis_url: str, stream: str) -> None:
    sealed_letters(redis_url, stream)
    keys = {"k1": SECRETS[0], "k2": SECRETS[1]}
    env = {**os.environ, "SQ_TEST_KEYRING": json.dumps({"current": "k2", "keys": keys})}
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--url", redis_url, "--port", "0",
         "--read-only", "--keyring-env", "SQ_TEST_KEYRING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        address = process.stdout.readline().strip() if process.stdout else ""
        assert address.startswith("http://127.0.0.1:"), address or process.communicate()[1]
        page = httpx.get(
            f"{address.rstrip('/')}/topic/dead-letters", params={"stream": stream}
        ).text
        assert '{"card":"4111-1111"}' in visible_text(page)
        process.terminate()
        _, err = process.communicate(timeout=20)
        assert "decrypting with the keyring of $SQ_TEST_KEYRING (key IDs k1, k2; current k2)" in err
        assert not any(secret in err + page for secret in SECRETS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
