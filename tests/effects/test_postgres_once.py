"""``streamq.effects.postgres.once``: an entry's effects committed once, against a real
PostgreSQL (tests/effects/conftest.py) and, for the handler test, the real server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from streamq import ConfigError, Message, StaleFencingTokenError
from streamq.effects.postgres import EFFECTS_TABLE, MIGRATION, migrate, once
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import run_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # slow: a PostgreSQL server process


def message(entry_id: str = "1700000000000-0", *, stream: str | None = None, group: str = "g",
            partition: int = 0, token: int | None = None) -> Message[Any]:  # fmt: skip
    return Message(entry_id, "job", {}, {}, 1, stream or f"s-{uuid.uuid4().hex[:8]}", group,
                   partition, None, token)  # fmt: skip


async def record(pg: Any, msg: Message[Any], table: str) -> bool:
    """One handler run: its effect (a row in ``table``) applied when ``first``."""
    async with pg.transaction(), once(pg, msg) as first:
        if first:
            await pg.execute(f"INSERT INTO {table} (entry) VALUES ($1)", msg.id)
    return first


@pytest.fixture
async def sink(pg: Any) -> str:
    """A table of effects for one test."""
    table = f"sink_{uuid.uuid4().hex[:10]}"
    await pg.execute(f"CREATE TABLE {table} (entry text NOT NULL)")
    return table


async def rows(pg: Any, table: str) -> list[str]:
    return [r["entry"] for r in await pg.fetch(f"SELECT entry FROM {table}")]


async def test_first_run_applies_and_a_redelivery_skips(pg: Any, sink: str) -> None:
    msg = message()
    assert await record(pg, msg, sink) is True
    assert await record(pg, msg, sink) is False  # the same entry delivered again
    assert await rows(pg, sink) == [msg.id]
    other_group = message(msg.id, stream=msg.stream, group="other")
    assert await record(pg, other_group, sink) is True  # another group's own effects


async def test_a_rolled_back_transaction_records_nothing(pg: Any, sink: str) -> None:
    msg = message()
    with pytest.raises(RuntimeError, match="handler failed"):
        async with pg.transaction(), once(pg, msg) as first:
            assert first
            await pg.execute(f"INSERT INTO {sink} (entry) VALUES ($1)", msg.id)
            raise RuntimeError("handler failed")
    assert await rows(pg, sink) == []
    assert await record(pg, msg, sink) is True  # the next delivery applies them
    assert await rows(pg, sink) == [msg.id]


async def test_outside_a_transaction_is_refused(pg: Any) -> None:
    with pytest.raises(ConfigError, match="inside a transaction"):
        async with once(pg, message()):
            pass
    with pytest.raises(ConfigError, match="asyncpg connection or a psycopg"):
        async with once(object(), message()):
            pass
    assert await pg.fetchval(f"SELECT count(*) FROM {EFFECTS_TABLE} WHERE idempotency_key "
                             "LIKE 'never%'") == 0  # fmt: skip


async def test_migration_is_repeatable_and_the_documented_sql(pg: Any) -> None:
    await migrate(pg)  # the fixture ran it already: IF NOT EXISTS
    guide = Path(__file__).parents[2] / "docs" / "guides" / "effects.md"
    assert MIGRATION.strip() in guide.read_text()


async def test_concurrent_duplicates_one_wins_at_read_committed(
    postgres_url: str, pg: Any, sink: str
) -> None:
    import asyncpg

    msg = message()
    other = await asyncpg.connect(postgres_url)
    try:
        first_tx = pg.transaction()
        await first_tx.start()
        async with once(pg, msg) as first:
            assert first
            await pg.execute(f"INSERT INTO {sink} (entry) VALUES ($1)", msg.id)
        seen: list[bool] = []

        async def duplicate() -> None:
            seen.append(await record(other, msg, sink))

        async with anyio.create_task_group() as tg:
            tg.start_soon(duplicate)
            await anyio.sleep(0.3)
            assert seen == []  # waits on the first transaction's row
            await first_tx.commit()
        assert seen == [False]
        assert await rows(pg, sink) == [msg.id]
    finally:
        await other.close()


async def test_concurrent_duplicate_goes_ahead_when_the_first_rolls_back(
    postgres_url: str, pg: Any, sink: str
) -> None:
    import asyncpg

    msg = message()
    other = await asyncpg.connect(postgres_url)
    try:
        first_tx = pg.transaction()
        await first_tx.start()
        async with once(pg, msg) as first:
            assert first
        seen: list[bool] = []

        async def duplicate() -> None:
            seen.append(await record(other, msg, sink))

        async with anyio.create_task_group() as tg:
            tg.start_soon(duplicate)
            await anyio.sleep(0.3)
            await first_tx.rollback()
        assert seen == [True]
        assert await rows(pg, sink) == [msg.id]
    finally:
        await other.close()


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
async def test_concurrent_duplicate_fails_cleanly_at_stricter_isolation(
    postgres_url: str, pg: Any, sink: str, isolation: str
) -> None:
    import asyncpg

    msg = message()
    other = await asyncpg.connect(postgres_url)
    try:
        first_tx = pg.transaction(isolation=isolation)
        await first_tx.start()
        async with once(pg, msg) as first:
            assert first
            await pg.execute(f"INSERT INTO {sink} (entry) VALUES ($1)", msg.id)
        failed: list[BaseException] = []

        async def duplicate() -> None:
            try:
                async with other.transaction(isolation=isolation), once(other, msg) as first:
                    if first:
                        await other.execute(f"INSERT INTO {sink} (entry) VALUES ($1)", msg.id)
            except asyncpg.SerializationError as e:
                failed.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(duplicate)
            await anyio.sleep(0.3)
            await first_tx.commit()
        assert len(failed) == 1  # SQLSTATE 40001: the handler fails and is retried
        assert await record(other, msg, sink) is False  # ... and the retry skips
        assert await rows(pg, sink) == [msg.id]
    finally:
        await other.close()


async def test_a_stale_fencing_token_is_refused(pg: Any, sink: str) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    new_owner = message("1-0", stream=stream, partition=2, token=7)
    assert await record(pg, new_owner, sink) is True
    same_owner = message("2-0", stream=stream, partition=2, token=7)
    assert await record(pg, same_owner, sink) is True
    stale = message("3-0", stream=stream, partition=2, token=6)
    with pytest.raises(StaleFencingTokenError, match="older than 7") as refused:
        await record(pg, stale, sink)
    assert (refused.value.token, refused.value.latest) == (6, 7)
    assert refused.value.scope == f"{stream}/g/2"
    assert await rows(pg, sink) == ["1-0", "2-0"]  # nothing of the stale owner's
    assert await pg.fetchval(f"SELECT count(*) FROM {EFFECTS_TABLE} WHERE idempotency_key = $1",
                             stale.idempotency_key) == 0  # fmt: skip
    other_partition = message("3-0", stream=stream, partition=1, token=6)
    assert await record(pg, other_partition, sink) is True  # tokens are per partition
    newer = message("4-0", stream=stream, partition=2, token=8)
    assert await record(pg, newer, sink) is True


async def test_psycopg_connections_work_too(postgres_url: str, sink: str) -> None:
    psycopg = pytest.importorskip("psycopg", reason="psycopg 3 is not installed")
    msg = message()
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        for expected in (True, False):
            async with conn.transaction(), once(conn, msg) as first:
                assert first is expected
                if first:
                    await conn.execute(f"INSERT INTO {sink} (entry) VALUES (%s)", (msg.id,))
        await conn.set_autocommit(True)
        with pytest.raises(ConfigError, match="inside a transaction"):
            async with once(conn, message()):
                pass
        cursor = await conn.execute(f"SELECT entry FROM {sink}")
        assert [row[0] for row in await cursor.fetchall()] == [msg.id]


async def test_a_handler_run_again_after_its_commit_applies_once(
    make_queue: QueueFactory, pg: Any, sink: str
) -> None:
    """The handler commits its transaction, then fails before the entry is acked: it runs
    again, and its row exists once."""
    mq = make_queue()
    calls: list[bool] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        async with pg.transaction(), once(pg, msg) as first:
            if first:
                await pg.execute(f"INSERT INTO {sink} (entry) VALUES ($1)", msg.id)
        calls.append(first)
        if len(calls) == 1:
            raise RuntimeError("crashed after the commit, before the ack")

    async with mq:
        entry_id = await mq.publish("job", 1)
        await run_until(mq, lambda: len(calls) == 2)
    assert calls == [True, False]
    assert await rows(pg, sink) == [entry_id]
