"""``streamq scheduled list|cancel STREAM [ID]``: the messages waiting to be delivered;
``streamq scheduled periodic STREAM``: the periodic publishers with their next tick."""

from __future__ import annotations

import argparse
import json

from ..publish.scheduled import PeriodicInfo
from ..publish.scheduling import ScheduledMessage
from ..queue import MessageQueue
from .arguments import count
from .outcome import EXIT_USAGE, CliError
from .render import one_line


def add_scheduled_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "cancel", "periodic"])
    p.add_argument("stream")
    p.add_argument("id", nargs="?", help="cancel: the scheduled ID")
    p.add_argument("--count", type=count(1), default=100, help="list: at most this many")
    p.add_argument("--json", action="store_true", help="list: one JSON object a line")


async def scheduled_command(mq: MessageQueue, args: argparse.Namespace) -> tuple[str, bool]:
    """What to print, and whether the command did what it was asked."""
    if args.action == "cancel":
        if not args.id:  # bad usage, as argparse's own errors
            raise CliError("scheduled cancel needs the scheduled ID", EXIT_USAGE)
        if await mq.cancel_scheduled(args.id):
            return f"cancelled {args.id}", True
        return f"{args.id} is not waiting (delivered, cancelled, or unknown)", False
    if args.action == "periodic":
        return _periodic(await mq.periodic_publishers(), as_json=args.json), True
    rows = await mq.scheduled(limit=args.count)
    if args.json:
        return "\n".join(json.dumps(_row(r)) for r in rows), True
    if not rows:
        return "no scheduled messages", True
    return "\n".join(_line(r) for r in rows), True


def _periodic(rows: list[PeriodicInfo], *, as_json: bool) -> str:
    if as_json:
        return "\n".join(json.dumps(_periodic_row(r)) for r in rows)
    if not rows:
        return "no periodic publishers recorded (they are once a consumer runs them)"
    return "\n".join(_periodic_line(r) for r in rows)


def _periodic_row(row: PeriodicInfo) -> dict[str, object]:
    last = None if row.last_tick is None else row.last_tick.isoformat()
    return {"name": row.name, "type": row.type, "every": row.every, "cron": row.cron,
            "timezone": row.timezone, "last_tick": last,
            "next_tick": row.next_tick.isoformat()}  # fmt: skip


def _periodic_line(row: PeriodicInfo) -> str:
    when = f"every {row.every:g}s" if row.every is not None else f"cron {row.cron}"
    if row.timezone is not None:
        when += f" ({row.timezone})"
    last = "never" if row.last_tick is None else row.last_tick.isoformat(timespec="seconds")
    next_tick = row.next_tick.isoformat(timespec="seconds")
    name, kind = one_line(row.name), one_line(row.type)
    return f"{name}  {kind}  {one_line(when)}  last {last}  next {next_tick}"


def _row(row: ScheduledMessage) -> dict[str, object]:
    return {"id": str(row.id), "type": row.type, "due": row.due.isoformat(),
            "key": row.key, "partition": row.partition}  # fmt: skip


def _line(row: ScheduledMessage) -> str:
    due = row.due.isoformat(timespec="milliseconds")
    key = "" if row.key is None else f"  key={one_line(row.key)}"
    return f"{one_line(row.id)}  {one_line(row.type)}  due {due}{key}"
