"""``streamq halted list STREAM GROUP [--limit N]``: the keys halted in ordered mode (every
partition of a partitioned topic), printed as they are read, a page of ``HSCAN`` at a time,
up to ``--limit``; ``streamq halted release STREAM GROUP KEY|--keyless
[--action retry|skip]``: let one go on (the partition's owner acts within a second)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from .._text import cut, one_line
from ..errors import StreamNotFoundError
from ..queue import MessageQueue
from ..topic.halted import ACTIONS, HaltedKey, each_halted
from .arguments import count
from .outcome import EXIT_USAGE, CliError
from .render import terminal_safe

REASON_CHARS = 72  # the reason column (--json gives it whole)
KEYLESS = "(keyless)"
LIST_LIMIT = 1000  # rows `halted list` prints unless --limit says otherwise
SCAN_COUNT = 200  # records read a call (HSCAN COUNT): what the listing holds at once


def add_halted_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "release"])
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("key", nargs="?", help="release: the halted key")
    p.add_argument(
        "--keyless", action="store_true", help="release: the keyless entries' lane (no KEY)"
    )
    p.add_argument(
        "--action", dest="release", choices=ACTIONS, default="retry",
        help="release: retry (run the entry again, a fresh delivery count) or skip "
        "(dead-letter it); default retry",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="list: one JSON object a line")
    p.add_argument(
        "--limit", type=count(1), default=LIST_LIMIT,
        help=f"list: print at most this many keys (default {LIST_LIMIT})",
    )  # fmt: skip


async def halted_command(mq: MessageQueue, args: argparse.Namespace) -> str:
    """What to print; CliError when the key is not halted (or the input is wrong)."""
    # usage first: no round trip for a wrong command line
    key = _released_key(args) if args.action == "release" else None
    info = await mq.topic_info()
    if not info.exists:
        raise StreamNotFoundError(f"stream {args.stream!r} does not exist")
    if args.group not in {g.name for g in info.groups}:
        raise CliError(f"consumer group {args.group!r} does not exist in {args.stream!r}")
    if args.action == "list":
        return await _print_listing(mq, args.group, limit=args.limit, as_json=args.json)
    shown = KEYLESS if key is None else repr(key)
    if not await mq.release_halted_key(key, skip=args.release == "skip"):
        raise CliError(f"key {shown} is not halted in group {args.group!r} of {args.stream!r}")
    return f"asked to release key {shown} ({args.release}); its partition's owner acts on it"


def _released_key(args: argparse.Namespace) -> str | None:
    if args.keyless and args.key is not None:
        raise CliError("halted release takes a KEY or --keyless, not both", EXIT_USAGE)
    if not args.keyless and args.key is None:
        raise CliError("halted release needs the KEY (or --keyless)", EXIT_USAGE)
    key: str | None = args.key
    return key


async def _print_listing(mq: MessageQueue, group: str, *, limit: int, as_json: bool) -> str:
    """Print ``group``'s halted keys as they are read (partition after partition, in the
    server's order within one), at most ``limit``; return what to print last."""
    shown = more = 0
    for partition, stream in enumerate(mq.streams):
        client = mq.client_for(stream)
        async for found in each_halted(client, stream, partition, SCAN_COUNT):
            rows = [row for of_group, row in found if of_group == group]
            printed = rows[: max(limit - shown, 0)]
            _print(_lines(printed, as_json=as_json, header=shown == 0))
            shown, more = shown + len(printed), more + len(rows) - len(printed)
    if more:
        return _more(more, as_json=as_json)
    return "" if shown or as_json else "no halted keys"


def _lines(rows: list[HaltedKey], *, as_json: bool, header: bool) -> list[str]:
    rows = sorted(rows, key=lambda r: (r.key is not None, r.key or ""))
    if as_json:
        return [json.dumps(_row(r)) for r in rows]
    lines = [
        f"{r.partition:>9}  {_key(r):<20} {one_line(r.entry_id):<22} "
        f"{cut(r.reason, REASON_CHARS):<{REASON_CHARS}}  {one_line(r.action or '-')}"
        for r in rows
    ]
    if header and lines:
        lines.insert(0, f"{'partition':>9}  {'key':<20} {'entry id':<22} "
                        f"{'reason':<{REASON_CHARS}}  release")  # fmt: skip
    return lines


def _print(lines: Iterable[str]) -> None:
    for line in lines:
        print(terminal_safe(line))
    sys.stdout.flush()


def _more(more: int, *, as_json: bool) -> str:
    """The line saying how many keys were left out: on stdout after the table; on stderr
    with ``--json``, so that stdout stays one JSON object a line."""
    line = f"... {more} more: use --limit"
    if not as_json:
        return line
    print(line, file=sys.stderr)
    return ""


def _key(row: HaltedKey) -> str:
    return KEYLESS if row.key is None else cut(row.key, 20)


def _row(row: HaltedKey) -> dict[str, object]:
    return {"partition": row.partition, "key": row.key, "entry_id": row.entry_id,
            "reason": row.reason, "action": row.action}  # fmt: skip
