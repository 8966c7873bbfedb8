"""The ``streamq`` command line: operate streams from a shell.

Every command but ``server`` needs ``--url`` or ``$STREAMQ_REDIS_URL``. Errors print one
line on stderr and exit non-zero: 1 for a failed operation (unknown stream, unknown ID),
2 for bad usage or input, 3 when the server cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

from ._redis import stream_rows
from .admin import TopicInfo
from .config import ENV_URL, CleanupPolicy, env_url
from .errors import (
    ConfigError,
    InvalidMessageIdError,
    MessageFormatError,
    ServerUnavailableError,
    StreamNotFoundError,
    StreamqError,
)
from .queue import MessageQueue

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _queue(args: argparse.Namespace, group: str = "streamq-cli") -> MessageQueue:
    url = args.url or env_url()
    if not url:
        raise CliError(f"no server: pass --url redis://host:port/db or set ${ENV_URL}", EXIT_USAGE)
    return MessageQueue(url, stream=args.stream, group=group, consumer="streamq-cli")


async def _require_stream(mq: MessageQueue) -> None:
    if not await mq.client.exists(mq.stream):
        raise StreamNotFoundError(f"stream {mq.stream!r} does not exist")


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def render_info(info: TopicInfo) -> str:
    lines = [
        f"stream        {info.stream}",
        f"length        {info.length}",
        f"first / last  {info.first_id or '-'} / {info.last_id or '-'}",
        f"dead letters  {info.dead_letters}",
        f"stopped IDs   {', '.join(info.stopped_ids) or '-'}",
        "",
        f"{'group':<20} {'last delivered':<22} {'pending':>8} {'lag':>8} "
        f"{'oldest pending':>15}  consumers",
    ]
    for g in info.groups:
        consumers = ", ".join(f"{c.name}({c.pending})" for c in g.consumers) or "-"
        lag = "?" if g.lag is None else str(g.lag)
        lines.append(
            f"{g.name:<20} {g.last_delivered_id:<22} {g.pending:>8} {lag:>8} "
            f"{_age(g.oldest_pending_age_ms):>15}  {consumers}"
        )
    if not info.groups:
        lines.append("(no consumer groups)")
    return "\n".join(lines)


# -- commands (each returns what to print) -------------------------------------------
async def cmd_publish(args: argparse.Namespace) -> str:
    try:
        data = json.loads(args.json)
    except ValueError as e:
        raise CliError(f"JSON argument is not valid JSON: {e}", EXIT_USAGE) from e
    meta = dict(item.split("=", 1) for item in args.meta or [])
    async with _closing(_queue(args)) as mq:
        return await mq.publish(args.type, data, meta=meta or None)


async def cmd_info(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        info = await mq.topic_info()
        if not info.exists:
            raise StreamNotFoundError(f"stream {args.stream!r} does not exist")
        if args.json:
            from dataclasses import asdict

            return json.dumps(asdict(info), indent=2)
        return render_info(info)


async def cmd_pending(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        rows = await mq.client.xpending_range(
            mq.stream, args.group, min="-", max="+", count=args.count
        )
        lines = [f"{'id':<24} {'consumer':<24} {'idle':>10} {'deliveries':>10}"]
        lines.extend(
            f"{row['message_id'].decode():<24} {row['consumer'].decode():<24} "
            f"{_age(int(row['time_since_delivered'])):>10} {row['times_delivered']:>10}"
            for row in rows
        )
        return "\n".join(lines) if rows else f"no pending entries in group {args.group!r}"


async def cmd_tail(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        cursor, shown = args.start, 0
        deadline = time.monotonic() + args.seconds if args.seconds else None
        while deadline is None or time.monotonic() < deadline:
            reply = await mq.client.xread({mq.stream: cursor}, count=100, block=500)
            for entry_id, fields in stream_rows(reply):
                cursor = entry_id.decode()
                decoded = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
                print(f"{cursor} {json.dumps(decoded)}", flush=True)
                shown += 1
                if args.count and shown >= args.count:
                    return ""
        return ""


async def cmd_dlq(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        if args.action == "list":
            letters = await mq.dead_letters(count=args.count)
            if not letters:
                return "no dead letters"
            return "\n".join(
                f"{d.id}  original {d.original_id}  type {d.type}  attempts {d.attempts}  {d.error}"
                for d in letters
            )
        if args.action == "replay":
            new_ids = await mq.replay_dead_letter(args.id)
            return f"replayed {len(new_ids)}: {' '.join(new_ids)}"
        return f"purged {await mq.purge_dead_letters()} dead letters"


async def cmd_stop_message(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        await mq.stop_message(args.id)
        return f"stopped {args.id}"


async def cmd_resume_message(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await mq.resume_message(args.id)
        return f"resumed {args.id}"


async def cmd_terminate(args: argparse.Namespace) -> str:
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        await mq.terminate_topic(keep_dead_letters=args.keep_dead_letters)
        return f"terminated {args.stream}"


async def cmd_cleanup(args: argparse.Namespace) -> str:
    from .cleanup import Cleaner

    policy = CleanupPolicy(
        max_stream_length=args.max_length,
        min_retention=args.min_retention,
        beyond_pending=args.beyond_pending,
    )
    async with _closing(_queue(args)) as mq:
        await _require_stream(mq)
        report = await Cleaner(mq.client, mq.stream, policy).run_once(dry_run=args.dry_run)
    if report.skipped:
        return f"nothing removed: {report.skipped}"
    verb = "would remove" if args.dry_run else "removed"
    checked = "; each deletion re-checked by the server" if report.server_checked else ""
    return (
        f"{verb} {report.removed} entries below {report.safe_point}; "
        f"length after {report.length_after}{checked}"
    )


class _closing:
    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq

    async def __aenter__(self) -> MessageQueue:
        return self.mq

    async def __aexit__(self, *exc: object) -> None:
        await self.mq.aclose()


def cmd_server(args: argparse.Namespace) -> int:
    from .server import EmbeddedServer

    for signum in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: stop the server, then exit
        signal.signal(signum, _interrupt)
    server = EmbeddedServer(port=args.port, appendonly=args.appendonly).start()
    print(server.url, flush=True)
    print(f"export {ENV_URL}={server.url}", file=sys.stderr, flush=True)
    try:
        while server.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        from bench.run import cli as bench_cli
    except ImportError:
        raise CliError(
            "the benchmark suite lives in the source tree: run it from the repository", EXIT_USAGE
        ) from None
    sys.argv = ["streamq bench", *args.rest]
    bench_cli()
    return 0


# -- parsing -------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamq", description="Operate streamq streams.")
    parser.add_argument("--url", help=f"Redis URL (default ${ENV_URL})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def command(
        name: str, func: Callable[..., Any], help_text: str, stream: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if stream:
            p.add_argument("stream")
        p.set_defaults(func=func)
        return p

    p = command(
        "server",
        cmd_server,
        "run the embedded server in the foreground, print its URL",
        stream=False,
    )
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--appendonly", action="store_true", help="persist with AOF")
    p = command("publish", cmd_publish, "publish one message: STREAM TYPE JSON")
    p.add_argument("type")
    p.add_argument("json")
    p.add_argument("--meta", action="append", metavar="KEY=VALUE")
    p = command(
        "info",
        cmd_info,
        "length, first/last, groups, consumers, pending, lag, dead letters, stopped IDs",
    )
    p.add_argument("--json", action="store_true")
    p = command("pending", cmd_pending, "pending entries of a group: STREAM GROUP")
    p.add_argument("group")
    p.add_argument("--count", type=int, default=100)
    p = command("tail", cmd_tail, "follow new entries")
    p.add_argument(
        "--from", dest="start", default="$", help="entry ID to start after (default: new only)"
    )
    p.add_argument("--count", type=int, default=0, help="stop after this many entries")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long")
    p = command("dlq", cmd_dlq, "dead letters: dlq list|replay|purge STREAM [ID]", stream=False)
    p.add_argument("action", choices=["list", "replay", "purge"])
    p.add_argument("stream")
    p.add_argument("id", nargs="?", help="replay: one dead letter ID (default: all)")
    p.add_argument("--count", type=int, default=100)
    p = command("stop-message", cmd_stop_message, "stop one entry ID for every consumer")
    p.add_argument("id")
    p = command("resume-message", cmd_resume_message, "resume a stopped entry ID")
    p.add_argument("id")
    p = command("terminate", cmd_terminate, "delete the stream, its groups and streamq's keys")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--keep-dead-letters", action="store_true")
    p = command("cleanup", cmd_cleanup, "remove entries every group has acknowledged")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--max-length", type=int, default=0, help="keep at least this many entries")
    p.add_argument(
        "--min-retention", type=float, default=0, help="keep entries younger than this (s)"
    )
    p.add_argument(
        "--beyond-pending",
        action="store_true",
        help="also remove acknowledged entries above a pending one (the pending ones stay)",
    )
    p = command("bench", cmd_bench, "run the benchmark suite", stream=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _confirm(args: argparse.Namespace) -> None:
    if args.command == "terminate" and not args.yes:
        if not sys.stdin.isatty():
            raise CliError("terminate deletes the stream: confirm with --yes", EXIT_USAGE)
        answer = input(f"Delete stream {args.stream!r}, its groups and streamq's keys? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CliError("not terminated", EXIT_FAILED)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("server", "bench"):
            return int(args.func(args))
        _confirm(args)
        coro: Callable[[argparse.Namespace], Coroutine[Any, Any, str]] = args.func
        output = anyio.run(coro, args)
    except CliError as e:
        return _fail(str(e), e.code)
    except ServerUnavailableError as e:
        return _fail(str(e), EXIT_UNREACHABLE)
    except (ConfigError, MessageFormatError, InvalidMessageIdError) as e:
        return _fail(str(e), EXIT_USAGE)
    except StreamqError as e:
        return _fail(str(e), EXIT_FAILED)
    except (ConnectionError, OSError) as e:
        return _fail(f"cannot reach the server: {e}", EXIT_UNREACHABLE)
    except KeyboardInterrupt:
        return 130
    if output:
        print(output)
    return 0


def _fail(message: str, code: int) -> int:
    print(f"streamq: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
