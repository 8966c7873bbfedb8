"""A URL naming several nodes of a cluster: the others are asked for the slot map when the
first does not answer (a process whose only URL is a dead node could not start)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from streamq import ConfigError, Message, MessageQueue, Publisher, StartFrom
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.wire.client import connect, connect_sync
from streamq.wire.seeds import split_seeds
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("url", "first", "others"),
    [
        ("redis://h:7000/0", "redis://h:7000/0", []),
        ("redis://h1:7000,h2:7001", "redis://h1:7000", [("h2", 7001)]),
        (
            "rediss://u:p,w@h1:7000,[::1]:7001,h3/2?protocol=3",
            "rediss://u:p,w@h1:7000/2?protocol=3",
            [("::1", 7001), ("h3", 6379)],
        ),
    ],
)
def test_a_url_names_its_first_node_and_the_others(
    url: str, first: str, others: list[tuple[str, int]]
) -> None:
    assert split_seeds(url) == (first, others)


@pytest.mark.parametrize("bad", ["redis://h1:7000,h2:x/0", "redis://h1:7000,/0"])
def test_a_bad_node_in_a_url_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="host:port, comma-separated"):
        split_seeds(bad)


def dead_port() -> int:
    """A local port nobody listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def seeded(streamq_cluster_url: str) -> Iterator[str]:
    """The cluster's URL with a dead node first."""
    live = streamq_cluster_url.split("://", 1)[1].split("/", 1)[0]
    yield f"redis://127.0.0.1:{dead_port()},{live}/0"


@pytest.mark.slow
async def test_a_dead_first_node_is_passed_over_for_the_next(
    seeded: str, streamq_cluster_url: str
) -> None:
    stream = f"test-{os.urandom(6).hex()}"
    mq = MessageQueue(
        seeded, stream=stream, group="g", start=StartFrom.EARLIEST, config=TEST_TIMINGS
    )
    handled: list[str] = []

    @mq.handler("ok")
    async def ok(msg: Message[int]) -> None:
        handled.append(msg.id)

    try:
        with anyio.fail_after(20):
            async with mq, mq.running():
                assert mq._deployment.cluster is True  # white box: routed as a cluster
                entry_id = await mq.publish("ok", 1)
                with Publisher(seeded, stream=stream) as publisher:
                    other_id = publisher.publish("ok", 2)
                await wait_for(lambda: handled == [entry_id, other_id], what="both handled")
    finally:
        delete_stream_keys(streamq_cluster_url, stream)


def test_several_nodes_that_are_no_cluster_are_a_config_error(
    redis_url: str, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("needs a server that is not a cluster node; the session's is one")
    node = redis_url.split("://", 1)[1].split("/", 1)[0]
    client = connect_sync(f"redis://{node},127.0.0.1:{dead_port()}/0").client_for("s", owner=True)
    with client, pytest.raises(ConfigError, match="no cluster"):
        client.ping()
    with pytest.raises(ConfigError, match="cluster=False"):
        connect_sync(f"redis://{node},{node}/0", cluster=False)


@pytest.mark.parametrize("make", [connect, connect_sync])
async def test_a_nodes_pool_is_made_like_the_url_nodes(redis_url: str, make: Any) -> None:
    """The pool of another node of the cluster (made on first use, no I/O) has the URL
    node's limits: as many connections, the same wait for a free one, the same timeouts."""
    deployment = make(redis_url)
    node = deployment.pool_at(("127.0.0.1", dead_port()))
    seed = deployment.seed
    assert type(node) is type(seed) and node.connection_class is seed.connection_class
    assert (node.max_connections, node.timeout) == (seed.max_connections, seed.timeout)
    assert node.connection_kwargs["socket_timeout"] == seed.connection_kwargs["socket_timeout"]
    if make is connect:
        await deployment.aclose()
    else:
        deployment.close()
