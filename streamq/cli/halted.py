"""``streamq halted list STREAM GROUP``: the keys halted in ordered mode (every partition
of a partitioned topic); ``streamq halted release STREAM GROUP KEY|--keyless
[--action retry|skip]``: let one go on (the partition's owner acts within a second)."""

from __future__ import annotations

import argparse
import json

from .._text import cut, one_line
from ..errors import StreamNotFoundError
from ..queue import MessageQueue
from ..topic.halted import ACTIONS, HaltedKey
from .outcome import EXIT_USAGE, CliError

REASON_CHARS = 72  # the reason column (--json gives it whole)
KEYLESS = "(keyless)"


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
        return _listing(await mq.halted_keys(), as_json=args.json)
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


def _listing(rows: list[HaltedKey], *, as_json: bool) -> str:
    rows = sorted(rows, key=lambda r: (r.partition, r.key is not None, r.key or ""))
    if as_json:
        return "\n".join(json.dumps(_row(r)) for r in rows)
    if not rows:
        return "no halted keys"
    lines = [f"{'partition':>9}  {'key':<20} {'entry id':<22} {'reason':<{REASON_CHARS}}  release"]
    lines.extend(
        f"{r.partition:>9}  {_key(r):<20} {one_line(r.entry_id):<22} "
        f"{cut(r.reason, REASON_CHARS):<{REASON_CHARS}}  {one_line(r.action or '-')}"
        for r in rows
    )
    return "\n".join(lines)


def _key(row: HaltedKey) -> str:
    return KEYLESS if row.key is None else cut(row.key, 20)


def _row(row: HaltedKey) -> dict[str, object]:
    return {"partition": row.partition, "key": row.key, "entry_id": row.entry_id,
            "reason": row.reason, "action": row.action}  # fmt: skip
