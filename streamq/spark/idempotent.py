"""Idempotent Spark writes: a retried task does not publish its rows twice.

Every row of a write has a name that is the same on each attempt of its task (for a
deterministic input): ``<job or query>:<batch>:<partition>:<row>``, its producer id. With
option ``idempotent`` each row's entry is added under that name:

* Redis >= 8.6 (probed once per task): ``XADD stream IDMP <producer> <row> * ...``, the
  server dropping an entry whose ``(producer, row)`` it has seen. It remembers the last
  ``IDMP-MAXSIZE`` IDs per producer (100 by default) for ``IDMP-DURATION`` (100 s by
  default): each run of :data:`IDMP_ROWS` rows is a producer of its own, so every row is
  remembered however large the partition; a retry later than the duration adds again.
* Elsewhere (Valkey, older Redis), with ``idempotent=true``: the script of
  :mod:`streamq.publish.idempotency`, which adds the entry and keeps the row's name for an
  hour in ``streamq:{<stream>}:idmp:<name>``, atomically (a key per row: about 130 bytes
  of server memory per row, for an hour).

``idempotent=auto`` (the default): the first where the server has it, else plain XADD
(at-least-once; the producer id in ``meta`` names the duplicates). ``false``: plain XADD.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import redis

from ..publish import idempotency
from ..publish.plan import stream_options
from ..wire import resp
from ..wire.features import probe_sync

IDMP_ROWS = 100  # rows per IDMP producer: the server's default IDMP-MAXSIZE
Mode = Literal["plain", "idmp", "script"]
Fields = dict[bytes | str, bytes | str]


@dataclass(frozen=True, slots=True)
class RowKeys:
    """How this task's rows are added: plain XADD, ``XADD ... IDMP``, or the script; with
    ``make_stream=False`` an entry whose stream is missing is not added (``NOMKSTREAM``,
    its reply nil: see ``writing.py``)."""

    mode: Mode = "plain"
    sha: str = ""  # the script's, in "script" mode
    make_stream: bool = True

    @property
    def options(self) -> tuple[str, ...]:
        """The XADD options before the ID or IDMP (none, or ``NOMKSTREAM``)."""
        return stream_options(self.make_stream)

    @property
    def script_flag(self) -> str:
        """The script's ARGV[2] (see :func:`streamq.publish.idempotency.script_flag`)."""
        return idempotency.script_flag(self.make_stream)

    def pack(
        self, stream: str, prefix: str, rows: Sequence[int], entries: Iterable[Fields]
    ) -> bytes:
        """The commands adding ``entries``, row ``rows[i]`` of the task's input for each."""
        if self.mode == "plain":
            return resp.pack_xadds(stream, entries, self.options)[0]
        commands = []
        for n, fields in zip(rows, entries, strict=True):
            flat = [item for pair in fields.items() for item in pair]
            commands.append(resp.pack(*self.head(stream, prefix, n), *flat))
        return b"".join(commands)

    def head(self, stream: str, prefix: str, n: int) -> tuple[str, ...]:
        """The command up to the fields, for row ``n``."""
        if self.mode == "idmp":
            return ("XADD", stream, *self.options, "IDMP", idmp_producer(prefix, n), str(n), "*")
        record = idempotency.record_key(stream, f"{prefix}:{n}")
        return ("EVALSHA", self.sha, "2", stream, record, str(WINDOW_MS), self.script_flag)


WINDOW_MS = int(idempotency.WINDOW * 1000)
PLAIN = RowKeys()


def idmp_producer(prefix: str, n: int) -> str:
    return f"{prefix}:{n // IDMP_ROWS}"


def row_keys(option: str, clients: Sequence[redis.Redis]) -> RowKeys:
    """How this task adds its rows, for option ``idempotent`` (``auto``, ``true``,
    ``false``): asks the server of the first partition stream once, and in "script" mode
    loads the script on each partition's server."""
    if option == "false":
        return PLAIN
    if probe_sync(clients[0]).xadd_idmp:
        return RowKeys("idmp")
    if option == "auto":
        return PLAIN
    shas = {client.script_load(idempotency.IDEMPOTENT_XADD) for client in clients}
    (sha,) = {s.decode() if isinstance(s, bytes) else str(s) for s in shas}
    return RowKeys("script", sha)
