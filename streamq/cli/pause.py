"""``streamq pause STREAM GROUP [--type T]`` and ``streamq unpause STREAM GROUP [--type
T]``: pause a consumer group (or one message type in it) on every consumer, within a
second and across restarts, and resume it (see :mod:`streamq.flow.pause`)."""

from __future__ import annotations

import argparse

from ..errors import StreamNotFoundError
from ..queue import MessageQueue
from .arguments import message_type
from .outcome import CliError
from .render import paused_text


def add_pause_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("group")
    p.add_argument(
        "--type", type=message_type, help="only entries of this message type (default: all)"
    )


async def pause_command(mq: MessageQueue, args: argparse.Namespace, *, pausing: bool) -> str:
    """What to print; CliError for a topic or group that does not exist, or a resume of
    what is not paused (a pause of what is paused already says so, and succeeds)."""
    info = await mq.topic_info()
    if not info.exists:
        raise StreamNotFoundError(f"stream {args.stream!r} does not exist")
    if args.group not in {g.name for g in info.groups}:
        raise CliError(f"consumer group {args.group!r} does not exist in {args.stream!r}")
    what = (
        f"group {args.group!r}"
        if args.type is None
        else f"type {args.type!r} in group {args.group!r}"
    )
    if pausing:
        changed = await mq.pause(args.type)
        return f"paused {what}" if changed else f"{what} was paused already"
    if not await mq.resume(args.type):
        raise CliError(f"{what} is not paused{_still(await mq.paused(), args.type)}")
    return f"resumed {what}{_still(await mq.paused(), args.type)}"


def _still(paused: list[str], resumed: str | None) -> str:
    """What stays paused after resuming ``resumed``: the other pauses of the group."""
    others = [p for p in paused if p != (resumed or "*")]
    return f" (still paused: {paused_text(others)})" if others else ""
