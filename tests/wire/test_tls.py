"""``rediss://``: a real TLS server connects (the handshake's own short timeout is no
obstacle to it); a plain port fails fast saying TLS (tests/wire/test_boundary.py,
tests/cli/test_cli_usage.py)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from streamq import Message, MessageQueue, Publisher
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


@pytest.fixture(scope="module")
def tls_url(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[str]:
    """A TLS server in front of the session's plain one (the embedded binary is built
    without TLS: "Failed finding TLS support"), with a self-signed certificate."""
    where: Path = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    plain = urlsplit(redis_url)
    loop = asyncio.new_event_loop()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(plain.hostname, plain.port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = loop.run_until_complete(asyncio.start_server(relay, "127.0.0.1", 0, ssl=context))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"rediss://127.0.0.1:{port}{plain.path or '/0'}?ssl_ca_certs={cert}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()  # (its self-pipe sockets, else unclosed-socket warnings later)


async def test_a_real_tls_server_connects(tls_url: str, on_cluster: bool) -> None:
    if on_cluster:
        pytest.skip("the TLS relay fronts one node; a cluster announces its nodes without it")
    mq = MessageQueue(url=tls_url, stream="tls-stream")
    got: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        got.append(msg.data)

    def publish_blocking() -> None:
        with Publisher(url=tls_url, stream="tls-stream") as publisher:
            publisher.publish("job", 1)

    async with mq.running():  # (the group reads what comes after it is made)
        await anyio.to_thread.run_sync(publish_blocking)
        await mq.publish("job", 2)
        await wait_for(lambda: sorted(got) == [1, 2], what="both handled over TLS")
