"""``unix://`` URLs: a server reached over its unix socket, by the API and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from streamq import EmbeddedServer, Message, MessageQueue, Publisher, StartFrom
from tests.helpers.cli import streamq

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def unix_url() -> Iterator[str]:
    with EmbeddedServer(unix_socket=True) as server:
        yield server.unix_url


async def test_a_queue_publishes_and_consumes_over_a_unix_socket(unix_url: str) -> None:
    mq = MessageQueue(url=unix_url, stream="unix-orders", group="g", start=StartFrom.EARLIEST)
    seen: list[int] = []
    done = anyio.Event()

    @mq.handler("order")
    async def order(msg: Message[dict[str, int]]) -> None:
        seen.append(msg.data["n"])
        if len(seen) == 3:
            done.set()

    async with mq.running():
        for n in range(3):
            await mq.publish("order", {"n": n})
        with anyio.fail_after(10):
            await done.wait()
        assert (await mq.topic_info()).length == 3
    assert sorted(seen) == [0, 1, 2]


def test_a_publisher_publishes_over_a_unix_socket(unix_url: str) -> None:
    with Publisher(unix_url, stream="unix-publisher") as publisher:
        assert publisher.publish("order", {"n": 1})
        assert publisher.publish("order", {"n": 2})
    result = streamq("info", "unix-publisher", "--json", url=unix_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["length"] == 2


def test_the_cli_says_in_one_line_that_a_missing_socket_cannot_be_reached(
    unix_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "none.sock"
    result = streamq("info", "x", url=f"unix://{missing}")
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach the server: cannot connect to {missing}:" in lines[0]
