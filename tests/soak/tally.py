"""What the soak counts: published (from the producers' files), handled (the consumers'
results hash), dead-lettered, pending, and from those what was lost."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio
from redis.exceptions import RedisError

from demos.exactly_once import applied_key
from streamq import MessageQueue, StreamqError
from streamq.wire.client import connect
from streamq.wire.routing import Deployment
from tests.soak.ordered import handled_ids, read_calls
from tests.soak.soak_consumer import GROUP, results_key

RETRY_FOR = 30.0  # the server may be restarting (AOF replay) when we ask
ATTEMPT_FOR = 8.0
LOST_SHOWN = 20
DEAD_LETTERS_MAX = 10_000_000

P = ParamSpec("P")
T = TypeVar("T")


async def retrying(fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """``await fn(...)``, again while the server cannot answer (up to RETRY_FOR seconds)."""
    last: BaseException | None = None
    deadline = anyio.current_time() + RETRY_FOR
    while anyio.current_time() < deadline:
        # Each attempt bounded too: on a cluster a read may hang past a failover.
        with anyio.move_on_after(ATTEMPT_FOR):
            try:
                return await fn(*args, **kwargs)
            except (RedisError, StreamqError, OSError) as e:
                last = e
        await anyio.sleep(0.2)
    raise TimeoutError(f"{fn.__name__} failed for {RETRY_FOR}s, last error: {last!r}")


def entry_key(entry_id: str) -> tuple[int, int, int]:
    part, _, entry_id = entry_id.rpartition(":")  # "3:<ms>-<seq>" on a partitioned topic
    ms, seq = entry_id.split("-")
    return int(part or 0), int(ms), int(seq)


@dataclass
class Tally:
    results_key: str
    published: dict[str, bool]  # entry ID -> poison
    handled: dict[str, int]  # entry ID -> completed handler calls
    dead: set[str]  # original IDs of dead letters
    dead_letters: int
    pending: int
    lag: int | None

    @property
    def published_count(self) -> int:
        return len(self.published)

    @cached_property
    def lost(self) -> list[str]:
        """Acknowledged by XADD, yet neither handled nor dead-lettered."""
        missing = (i for i in self.published if i not in self.handled and i not in self.dead)
        return sorted(missing, key=entry_key)

    @property
    def settled(self) -> bool:
        return not self.lost and self.pending == 0 and not self.lag

    def progress(self) -> str:
        return (f"published {self.published_count}, handled {len(self.handled)}, "
                f"pending {self.pending}, dead {self.dead_letters}")  # fmt: skip

    def figures(self) -> dict[str, Any]:
        poison = {i for i, p in self.published.items() if p}
        return {
            "published": self.published_count,
            "handled_distinct": sum(1 for i in self.published if i in self.handled),
            # entries of a publish attempt that failed (so not "published") but reached the
            # stream before the failure, and were handled
            "handled_unacknowledged_publish": sum(1 for i in self.handled if i not in self.published),
            "duplicates": sum(n - 1 for n in self.handled.values()),
            "entries_handled_more_than_once": sum(1 for n in self.handled.values() if n > 1),
            "lost": len(self.lost),
            "pending": self.pending,
            "lag": self.lag,
            "dead_letters": self.dead_letters,
            "dead_letters_poison": len(poison & self.dead),
            "dead_letters_not_poison": len(self.dead - poison),
            "poison_published": len(poison),
            "poison_handled": len(poison & self.handled.keys()),
            "settled": self.settled,
        }  # fmt: skip

    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"LOST {len(self.lost)} entries, first {self.lost[:5]}")
        if self.pending or self.lag:
            found.append(f"not settled: {self.pending} pending, lag {self.lag}")
        if poisoned := [i for i, p in self.published.items() if p and i in self.handled]:
            found.append(f"poison entries reported handled: {poisoned[:5]}")
        return found


def read_published(run_dir: Path) -> dict[str, bool]:
    published = {}
    for path in sorted(run_dir.glob("published-*.txt")):
        for line in path.read_text(encoding="ascii").splitlines():
            entry_id, _, poison = line.partition(" ")
            if poison:  # a line being written has no flag yet
                published[entry_id] = poison == "1"
    return published


async def collect(admin: MessageQueue, stream: str, run_dir: Path, mode: str = "plain") -> Tally:
    """The tally now; in ordered mode ``handled`` comes from the consumers' call files
    (:mod:`tests.soak.ordered`), in exactly-once mode from the ledger's hash ``applied``
    (written with each ack); pending and lag are the group's over all partitions."""
    key = applied_key(stream) if mode == "exactly-once" else results_key(stream)
    if mode == "ordered":
        handled = handled_ids(read_calls(run_dir))
    else:
        raw = await admin.client.hgetall(key)
        handled = {k.decode(): int(v) for k, v in raw.items()}
    letters = await admin.dead_letters(DEAD_LETTERS_MAX)
    # topic_info asks each partition stream on the node serving it: on a cluster the
    # partitions lie on other slots than the topic's name (which admin.client serves).
    groups = {g.name: g for g in (await admin.topic_info()).groups}
    pending, lag = (groups[GROUP].pending, groups[GROUP].lag) if GROUP in groups else (0, None)
    return Tally(key, read_published(run_dir), handled, {d.original_id for d in letters},
                 len(letters), pending, lag)  # fmt: skip


async def describe_lost(admin: MessageQueue, stream: str, tally: Tally) -> list[dict[str, Any]]:
    """Where each of the first lost entries is: still in the stream? pending with whom?"""
    deployment = connect(admin.url)  # a client per partition stream: each on its own slot
    try:
        return [await describe_one(deployment, admin.streams, stream, entry_id)
                for entry_id in tally.lost[:LOST_SHOWN]]  # fmt: skip
    finally:
        await deployment.aclose()


async def describe_one(
    deployment: Deployment, streams: Sequence[str], stream: str, entry_id: str
) -> dict[str, Any]:
    if ":" in entry_id:  # a partitioned topic's ID names its partition
        part, _, entry_id = entry_id.partition(":")
        stream = streams[int(part)]
    client = deployment.client_for(stream)
    in_stream = bool(await client.xrange(stream, min=entry_id, max=entry_id))
    rows = await client.xpending_range(stream, GROUP, entry_id, entry_id, 1)
    row: dict[str, Any] = {"id": entry_id, "in_stream": in_stream, "pending": bool(rows)}
    if rows:
        row["consumer"] = rows[0]["consumer"].decode()
        row["times_delivered"] = rows[0]["times_delivered"]
        row["idle_ms"] = rows[0]["time_since_delivered"]
    return row
