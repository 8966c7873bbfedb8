"""The ``streamq`` commands that talk to Redis: each takes the parsed arguments and returns
what :func:`streamq.cli.main.main` prints (text from Redis escaped by
:mod:`streamq.cli.render`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from datetime import datetime

from .._ids import StreamId
from ..config import ENV_URL, CleanupPolicy, env_url
from ..errors import GroupNotFoundError, StreamNotFoundError
from ..payload.keyring import Keyring
from ..publish.plan import named
from ..queue import MessageQueue
from ..server.shared import running_shared_url
from ..topic.cleanup import Cleaner, CleanupReport
from ..topic.partitions import PartitionedId
from ..wire.damage import noting
from ..wire.keys import Keys
from ..wire.records import as_text
from ..wire.replies import Pending, pending_rows
from ..wire.urls import redact
from .arguments import keyring_of
from .forget import forget_command
from .halted import halted_command
from .outcome import EXIT_USAGE, CliError
from .pause import pause_command
from .render import render_dead_letters, render_info, render_pending
from .scheduled import scheduled_command
from .tail import tail


def _queue(
    args: argparse.Namespace, group: str = "streamq-cli", keyring: Keyring | None = None
) -> MessageQueue:
    """The queue a command works through; with ``keyring`` (``--keyring-env``) it
    decrypts, and a replay encrypts again with its current key."""
    url = args.url or env_url() or running_shared_url()  # a one-shot command starts no server
    if not url:
        raise CliError(
            f"no server: pass --url redis://host:port/db, set ${ENV_URL}, "
            "or start the shared server (streamq server)",
            EXIT_USAGE,
        )
    try:
        mq = MessageQueue(
            url, stream=args.stream, group=group, consumer="streamq-cli", encryption=keyring
        )
        mq.client  # noqa: B018  # parses the URL (without connecting)
    except ValueError as e:  # ConfigError names what is wrong, never the URL
        raise CliError(redact(str(e)), EXIT_USAGE) from e
    return mq


async def _require_stream(mq: MessageQueue) -> None:
    if len(mq.streams) > 1:
        if not (await mq.topic_info()).exists:
            raise StreamNotFoundError(f"topic {mq.stream!r} does not exist")
        return
    if await _stream_type(mq, mq.stream) is None:
        raise StreamNotFoundError(f"stream {mq.stream!r} does not exist")


async def _require_stream_or_dead_letters(mq: MessageQueue) -> None:
    """Some stream of the topic (one per partition and level) or its dead letters: the
    streams may be gone while their dead letters were kept (terminate --keep-...)."""
    for stream in mq.streams:
        if await _stream_type(mq, stream):
            return
        if await mq.client_for(stream).exists(Keys(stream).dead_letters):
            return
    what = "topic" if len(mq.streams) > 1 else "stream"
    raise StreamNotFoundError(f"{what} {mq.stream!r} does not exist")


async def _stream_type(mq: MessageQueue, key: str) -> str | None:
    """``"stream"`` if ``key`` is one, None if it does not exist; CliError naming the type
    a key of another type holds (a name taken by something else than a stream)."""
    found = as_text(await mq.client_for(key).type(key))
    if found == "none":
        return None
    if found != "stream":
        raise CliError(f"{key!r} is not a stream: it holds a {found}")
    return found


# -- commands (each returns what to print) -------------------------------------------
async def cmd_publish(args: argparse.Namespace) -> str:
    try:
        data = json.loads(args.json)
    except ValueError as e:
        raise CliError(f"JSON argument is not valid JSON: {e}", EXIT_USAGE) from e
    meta = _parse_meta(args.meta or [])
    async with _closing(_queue(args)) as mq:
        return await mq.publish(
            args.type, data, meta=meta or None, key=args.key, delay=args.delay,
            schedule_id=args.schedule_id, priority=args.priority,
        )  # fmt: skip


def _parse_meta(items: list[str]) -> dict[str, str]:
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--meta takes KEY=VALUE, got {item!r}", EXIT_USAGE)
        meta[key] = value
    return meta


async def cmd_info(args: argparse.Namespace) -> str:
    # the records set aside reading the topic's shape too are named with its figures
    with noting() as damaged:
        async with _closing(_queue(args)) as mq:
            info = await mq.topic_info()
    if damaged:
        info = replace(info, damaged=[str(record) for record in damaged])
    if not info.exists:
        raise StreamNotFoundError(f"stream {args.stream!r} does not exist")
    if args.json:
        from dataclasses import asdict

        return json.dumps(asdict(info), indent=2, default=_isoformat)
    return render_info(info)


def _isoformat(value: object) -> str:
    """What json cannot write itself in ``info --json``: ``next_due`` (a datetime)."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


async def cmd_pending(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        rows = await _pending(mq, args.group, args.count)
        return render_pending(rows) if rows else f"no pending entries in group {args.group!r}"


async def _pending(mq: MessageQueue, group: str, count: int) -> list[Pending]:
    """At most ``count`` pending entries of ``group``, stream by stream over the topic's
    streams (partitions, priority levels), with IDs as ``publish`` names them; CliError if
    no stream has the group."""
    rows: list[Pending] = []
    found = False
    for index, stream in enumerate(mq.streams):
        if len(rows) == count:
            break
        try:
            reply = await mq.client_for(stream).xpending_range(
                stream, group, min="-", max="+", count=count - len(rows)
            )
        except GroupNotFoundError:
            continue  # a stream of the topic without the group: none of its entries pend
        found = True
        streams = len(mq.streams)
        rows += [replace(row, id=named(streams, index, row.id)) for row in pending_rows(reply)]
    if not found:
        raise CliError(f"consumer group {group!r} does not exist in stream {mq.stream!r}")
    return rows


async def cmd_tail(args: argparse.Namespace) -> str:
    if args.start != "$" and ":" not in args.start:
        StreamId.parse(args.start)
    keyring = keyring_of(args)
    async with _closing(_queue(args, keyring=keyring)) as mq:
        await _require_stream(mq)
        start = args.start
        if ":" in start:  # an ID tail printed of a partitioned topic: every partition after it
            start = PartitionedId.parse(start, len(mq.streams)).entry_id
        await tail(
            mq, start, count=args.count, seconds=args.seconds, still_there=_require_stream,
            keyring=keyring,
        )  # fmt: skip
        return ""


async def cmd_dlq(args: argparse.Namespace) -> str:
    keyring = keyring_of(args)
    async with _closing(_queue(args, keyring=keyring)) as mq:
        await _require_stream_or_dead_letters(mq)
        if args.action == "list":
            letters = await mq.dead_letters(count=args.count)
            if not letters:
                return "no dead letters"
            return render_dead_letters(letters, full_traceback=args.full, keyring=keyring)
        if args.action == "replay":
            new_ids = await mq.replay_dead_letter(args.id)
            return f"replayed {len(new_ids)}: {' '.join(new_ids)}"
        return f"purged {await mq.purge_dead_letters()} dead letters"


async def cmd_scheduled(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        output, done = await scheduled_command(mq, args)
    if not done:
        raise CliError(output)
    return output


async def cmd_halted(args: argparse.Namespace) -> str:
    async with _closing(_queue(args, group=args.group)) as mq:
        return await halted_command(mq, args)


async def cmd_forget(args: argparse.Namespace) -> str:
    async with _closing(_queue(args, group=args.group)) as mq:
        return await forget_command(mq, args)


async def cmd_pause(args: argparse.Namespace) -> str:
    async with _closing(_queue(args, group=args.group)) as mq:
        return await pause_command(mq, args, pausing=True)


async def cmd_unpause(args: argparse.Namespace) -> str:
    async with _closing(_queue(args, group=args.group)) as mq:
        return await pause_command(mq, args, pausing=False)


async def cmd_stop_message(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        await mq.stop_message(args.id)
        return f"stopped {args.id}"


async def cmd_resume_message(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        await mq.resume_message(args.id)
        return f"resumed {args.id}"


async def cmd_terminate(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        await mq.terminate_topic(keep_dead_letters=args.keep_dead_letters)
        return f"terminated {args.stream}"


async def cmd_cleanup(args: argparse.Namespace) -> str:
    """One cleanup pass over each stream of the topic (one per partition and level)."""
    policy = CleanupPolicy(
        max_stream_length=args.max_length,
        min_retention=args.min_retention,
        beyond_pending=args.beyond_pending,
    )
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        reports = [
            (stream, await Cleaner(mq.client_for(stream), stream, policy).run_once(
                dry_run=args.dry_run))
            for stream in mq.streams
        ]  # fmt: skip
    if len(reports) == 1:
        return _cleanup_line(reports[0][1], args.dry_run)
    lines = [f"{stream}: {_cleanup_line(report, args.dry_run)}" for stream, report in reports]
    verb = "would remove" if args.dry_run else "removed"
    total = sum(report.removed for _, report in reports)
    return "\n".join([*lines, f"{verb} {total} entries over {len(reports)} streams"])


def _cleanup_line(report: CleanupReport, dry_run: bool) -> str:
    if report.skipped:
        return f"nothing removed: {report.skipped}"
    verb = "would remove" if dry_run else "removed"
    checked = "; each deletion re-checked by the server" if report.server_checked else ""
    return (
        f"{verb} {report.removed} entries below {report.safe_point}; "
        f"length after {report.length_after}{checked}"
    )


class _closing:
    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq

    async def __aenter__(self) -> MessageQueue:
        await self.mq._discover_partitions()  # a partitioned topic is operated as such
        return self.mq

    async def __aexit__(self, *exc: object) -> None:
        await self.mq.aclose()
