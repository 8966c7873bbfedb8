"""A real PostgreSQL per test session (demos/postgres.py) with streamq's tables, and
a connection per test. ``make test`` installs Debian's postgresql when it is missing
(``make postgres-deps``); without it these tests skip, saying why."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from demos.postgres import postgres_bin, postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("Debian's postgresql is not installed (make test installs it: "
                    "apt-get install postgresql)")  # fmt: skip
    with postgres_server(bin_dir) as url:
        yield url


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[Any]:
    """An asyncpg connection to the session's server, streamq's tables created."""
    asyncpg = pytest.importorskip("asyncpg", reason="the effects tests need asyncpg (make setup)")
    from streamq.effects.postgres import migrate

    conn = await asyncpg.connect(postgres_url)
    await migrate(conn)
    yield conn
    await conn.close()
