"""Fixtures of the flow-control tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from streamq.wire.client import connect


@pytest.fixture
async def raw(redis_url: str, stream: str) -> AsyncIterator[aioredis.Redis]:
    """A plain client of ``stream``'s slot (its node's, on a cluster)."""
    deployment = connect(redis_url)
    yield deployment.client_for(stream)
    await deployment.aclose()
