"""Raw clients of the test server, for what a test reads or writes behind streamq's back."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from streamq.wire.client import connect_sync


def sync_client(url: str, stream: str) -> redis.Redis:
    """A blocking raw client for ``stream``'s keys (on a cluster: its slot's master)."""
    return connect_sync(url).client_for(stream, owner=True)


def each_master(url: str) -> list[redis.Redis]:
    """Blocking clients of every master (the URL's node alone when not a cluster): for
    what a server keeps per node, such as ACL users, which a test must set on each."""
    deployment = connect_sync(url)
    with deployment.client_for("probe") as probe:
        probe.ping()  # learns whether this is a cluster, and its slot table
    state = deployment.state
    addresses = state.table.masters() if state.cluster else [state.address]
    options = deployment.seed.connection_kwargs
    deployment.close()
    clients = []
    for host, port in addresses:
        pool = redis.ConnectionPool(**{**options, "host": host, "port": port})
        client = redis.Redis(connection_pool=pool)
        client.auto_close_connection_pool = True  # closing the client closes its pool
        clients.append(client)
    return clients


async def pending_count(client: aioredis.Redis, stream: str, group: str) -> int:
    """How many entries of ``stream`` are pending for ``group``."""
    return int((await client.xpending(stream, group))["pending"])
