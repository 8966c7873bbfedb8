"""PostgreSQL effects applied once per entry: ``async with once(conn, msg) as first:``.

A handler that crashed after committing its transaction and before its entry was acked
runs again (at-least-once). Recording the entry's :attr:`~streamq.Message.idempotency_key`
in the *same* transaction as the handler's own writes makes the two commit together or not
at all, so the second run can tell::

    async with conn.transaction():
        async with once(conn, msg) as first:
            if first:
                await conn.execute("UPDATE accounts SET balance = balance + $1 ...", ...)

``first`` is False when that entry's effects were already committed: the handler skips
them (and returns normally, so the entry is acked). A transaction that rolls back leaves no
record, so the next delivery applies the effects.

**Ordered mode.** When ``msg.fencing_token`` is set, ``once`` also keeps the highest token it
saw per partition and refuses an older one with :class:`~streamq.StaleFencingTokenError`,
before recording anything: a consumer that lost its partition to another (a long pause, a
network partition) and has not noticed yet cannot write behind the new owner's back.

**Concurrency.** Two transactions recording the same entry at once (a claimed entry whose
former consumer is still running): at READ COMMITTED (PostgreSQL's default) the second
waits on the first's row; if the first commits the second gets ``first=False``, if it rolls
back the second gets ``first=True``. At REPEATABLE READ or SERIALIZABLE the second fails
with the driver's serialization error instead (SQLSTATE 40001): the handler fails, the
entry is retried, and the retry sees ``first=False``. The fencing row is locked the same
way, so the transactions of one partition's stale and new owner are ordered.

**Migration.** :func:`migrate` creates the two tables (``IF NOT EXISTS``); the same SQL is
:data:`MIGRATION` (and in the guide) for a migration tool of your own. The tables live in
the connection's ``search_path``. Rows are never removed by streamq: delete rows older
than the longest time an entry can stay pending (``committed_at``) when you want.

Drivers: asyncpg (``asyncpg.Connection``, or a pool's connection) and psycopg 3
(``psycopg.AsyncConnection``); ``once`` needs an open transaction (asyncpg:
``conn.transaction()``; psycopg: not in autocommit mode, or inside ``conn.transaction()``),
else it raises ConfigError: a record committed on its own would mark effects as applied
that were never written.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..errors import ConfigError, StaleFencingTokenError
from ..message import Message

EFFECTS_TABLE = "streamq_effects"
FENCING_TABLE = "streamq_fencing"

MIGRATION = f"""\
CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} (
    idempotency_key text PRIMARY KEY,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {FENCING_TABLE} (
    partition text PRIMARY KEY,
    fencing_token bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
"""

# The entry's record: a row back when it was inserted now, none when it existed.
_RECORD = f"""
INSERT INTO {EFFECTS_TABLE} (idempotency_key) VALUES ($1)
ON CONFLICT (idempotency_key) DO NOTHING RETURNING true
"""
# The partition's highest token, raised to this one unless it is higher already: a row
# back (this token) when accepted, none when a newer owner wrote before.
_FENCE = f"""
INSERT INTO {FENCING_TABLE} (partition, fencing_token) VALUES ($1, $2)
ON CONFLICT (partition) DO UPDATE
  SET fencing_token = EXCLUDED.fencing_token, updated_at = now()
  WHERE {FENCING_TABLE}.fencing_token <= EXCLUDED.fencing_token
RETURNING fencing_token
"""
_LATEST = f"SELECT fencing_token FROM {FENCING_TABLE} WHERE partition = $1"


async def migrate(conn: Any) -> None:
    """Create streamq's tables (:data:`MIGRATION`) if they do not exist; ``conn``: an
    asyncpg connection or a psycopg 3 ``AsyncConnection`` (committed here when it was not
    inside a transaction block before)."""
    driver = _driver(conn)
    outside = driver == "psycopg" and not conn.autocommit and _psycopg_idle(conn)
    await conn.execute(MIGRATION)
    if outside:
        await conn.commit()


@asynccontextmanager
async def once(conn: Any, msg: Message[Any]) -> AsyncIterator[bool]:
    """Record ``msg``'s entry in the open transaction of ``conn``; yield whether this is
    the first time (False: its effects were committed before, skip them).

    Raises StaleFencingTokenError (ordered mode: a newer owner of the partition wrote
    already), ConfigError when ``conn`` is not in a transaction or not a supported driver.
    """
    driver = _driver(conn)
    _require_transaction(conn, driver)
    if msg.fencing_token is not None:
        await _check_fence(conn, driver, msg)
    first = await _fetch_value(conn, driver, _RECORD, msg.idempotency_key)
    yield first is not None


def fencing_scope(msg: Message[Any]) -> str:
    """The fencing row of ``msg``'s partition: ``"<stream>/<group>/<partition>"`` (as in
    the idempotency key, ``%`` and ``/`` escaped in the names)."""
    stream, group, _ = msg.idempotency_key.rsplit("/", 2)
    return f"{stream}/{group}/{msg.partition}"


async def _check_fence(conn: Any, driver: str, msg: Message[Any]) -> None:
    token, scope = msg.fencing_token, fencing_scope(msg)
    assert token is not None
    if await _fetch_value(conn, driver, _FENCE, scope, token) is not None:
        return
    latest = await _fetch_value(conn, driver, _LATEST, scope)
    raise StaleFencingTokenError(
        f"entry {msg.id} of {msg.stream!r} carries fencing token {token}, older than "
        f"{latest} already written for partition {msg.partition} (group {msg.group!r}): "
        "another consumer owns the partition now; nothing was written",
        token=token, latest=int(latest or 0), scope=scope,
    )  # fmt: skip


def _driver(conn: Any) -> str:
    """The driver, "asyncpg" or "psycopg", from the connection's class; else ConfigError."""
    roots = {cls.__module__.partition(".")[0] for cls in type(conn).__mro__}
    if "asyncpg" in roots:
        return "asyncpg"
    if "psycopg" in roots:
        import psycopg

        if isinstance(conn, psycopg.AsyncConnection):
            return "psycopg"
    raise ConfigError(
        "once() takes an asyncpg connection or a psycopg 3 AsyncConnection, "
        f"got {type(conn).__name__}"
    )


def _require_transaction(conn: Any, driver: str) -> None:
    if driver == "asyncpg":
        open_ = conn.is_in_transaction()
    else:
        open_ = not conn.autocommit or not _psycopg_idle(conn)
    if not open_:
        raise ConfigError(
            "once() must run inside a transaction of the same connection (asyncpg: "
            "`async with conn.transaction():`; psycopg: `async with conn.transaction():` "
            "or autocommit off), so that the record commits with your writes or not at all"
        )


def _psycopg_idle(conn: Any) -> bool:
    """Whether a psycopg connection is outside any transaction block."""
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status == TransactionStatus.IDLE)


_PSYCOPG_PARAM = re.compile(r"\$\d+")


async def _fetch_value(conn: Any, driver: str, sql: str, *args: Any) -> Any:
    """The first column of the first row, or None when there is no row."""
    if driver == "asyncpg":
        return await conn.fetchval(sql, *args)
    cursor = await conn.execute(_PSYCOPG_PARAM.sub("%s", sql), args)
    row = await cursor.fetchone()
    return None if row is None else row[0]
