"""The ``streamq`` command line: operate streams from a shell.

Every command but ``server`` and ``run`` needs ``--url`` (before or after the command),
``$STREAMQ_REDIS_URL``, or the shared embedded server running (``streamq server``).
Errors print one line on stderr and exit non-zero:

* 1: a failed operation (unknown stream, group or ID);
* 2: bad usage or input (arguments, JSON, an invalid URL, credentials the server refuses);
* 3: the server cannot be reached.

Text that comes from Redis is printed with its control characters escaped (see
:mod:`streamq.cli.render`). The benchmark suite is not a command: it lives in the source
tree (``make bench``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

from .._version import __version__
from ..config import ENV_URL
from ..errors import StreamqError
from .arguments import Parser, add_keyring_argument, count, duration
from .asyncapi import add_asyncapi_arguments, cmd_asyncapi
from .commands import (
    cmd_cleanup,
    cmd_dlq,
    cmd_forget,
    cmd_halted,
    cmd_info,
    cmd_pause,
    cmd_pending,
    cmd_publish,
    cmd_resume_message,
    cmd_scheduled,
    cmd_stop_message,
    cmd_tail,
    cmd_terminate,
    cmd_unpause,
)
from .compat import add_compat_arguments, cmd_compat
from .dashboard import add_dashboard_arguments, cmd_dashboard
from .forget import add_forget_arguments
from .halted import add_halted_arguments
from .outcome import EXIT_FAILED, EXIT_USAGE, CliError, describe_error, fail, reader_gone
from .pause import add_pause_arguments
from .render import one_line, terminal_safe
from .run import add_run_arguments, cmd_run
from .scheduled import add_scheduled_arguments
from .server import add_server_arguments, cmd_server

# -- parsing -------------------------------------------------------------------------
URL_HELP = f"Redis URL (default ${ENV_URL})"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="streamq", description="Operate streamq streams.")
    parser.add_argument("--version", action="version", version=f"streamq {__version__}")
    parser.add_argument("--url", help=URL_HELP)
    # The same option after the command; SUPPRESS keeps the value given before it.
    options_after = Parser(add_help=False)
    options_after.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def command(
        name: str, func: Callable[..., Any], help_text: str, stream: bool = True
    ) -> argparse.ArgumentParser:
        parents = [options_after] if name != "server" else []
        p = sub.add_parser(name, help=help_text, description=help_text, parents=parents)
        if stream:
            p.add_argument("stream")
        p.set_defaults(func=func)
        return p

    p = command(
        "server",
        cmd_server,
        "the shared embedded server: attach (start if needed) and print its URL, stop, status; "
        "--private or --cluster N: a server of its own in the foreground",
        stream=False,
    )
    add_server_arguments(p)
    p = command("dashboard", cmd_dashboard, "serve the web dashboard (extra [dashboard])", False)
    add_dashboard_arguments(p)
    p = command("run", cmd_run, "run a service's handlers (module:attr) in worker processes",
                stream=False)  # fmt: skip
    add_run_arguments(p)
    p = command("asyncapi", cmd_asyncapi, "print the AsyncAPI 3.0 document of a queue or App",
                stream=False)  # fmt: skip
    add_asyncapi_arguments(p)
    p = command("compat", cmd_compat, "the breaking changes between two AsyncAPI documents "
                "(OLD NEW): exit 1 when there is one", stream=False)  # fmt: skip
    add_compat_arguments(p)
    p = command("publish", cmd_publish, "publish one message: STREAM TYPE JSON")
    p.add_argument("type")
    p.add_argument("json")
    p.add_argument("--meta", action="append", metavar="KEY=VALUE")
    p.add_argument("--key", help="partition key (a partitioned topic: same key, same partition)")
    p.add_argument("--delay", type=float, help="deliver after this many seconds (scheduled)")
    p.add_argument("--schedule-id", help="name the scheduled message (again: replaces it)")
    p.add_argument("--priority", type=int, help="a topic with priorities: its level (0 first)")
    p = command(
        "scheduled", cmd_scheduled,
        "scheduled messages: scheduled list|cancel STREAM [ID]; periodic publishers: "
        "scheduled periodic STREAM", stream=False,
    )  # fmt: skip
    add_scheduled_arguments(p)
    p = command(
        "halted", cmd_halted,
        "ordered mode's halted keys: halted list STREAM GROUP [--limit N]; "
        "halted release STREAM GROUP KEY|--keyless [--action retry|skip]", stream=False,
    )  # fmt: skip
    add_halted_arguments(p)
    p = command(
        "forget", cmd_forget,
        "delete a consumer gone for good from its group (every partition) and from ordered "
        "mode's membership: forget STREAM GROUP CONSUMER", stream=False,
    )  # fmt: skip
    add_forget_arguments(p)
    p = command(
        "pause", cmd_pause,
        "pause a consumer group, or one message type in it (--type), on every consumer "
        "until unpaused: pause STREAM GROUP [--type T]",
    )  # fmt: skip
    add_pause_arguments(p)
    p = command(
        "unpause", cmd_unpause,
        "resume a paused group (types paused on their own stay paused), or one type "
        "(--type): unpause STREAM GROUP [--type T]",
    )  # fmt: skip
    add_pause_arguments(p)
    p = command(
        "info",
        cmd_info,
        "length, first/last, groups, consumers, pending, lag, dead letters, stopped IDs",
    )
    p.add_argument("--json", action="store_true")
    p = command("pending", cmd_pending, "pending entries of a group: STREAM GROUP")
    p.add_argument("group")
    p.add_argument("--count", type=count(1), default=100, help="at most this many (100)")
    p = command(
        "tail",
        cmd_tail,
        "follow new entries (every partition of a partitioned topic), one JSON object "
        '{"id","type","data","meta"} a line',
    )
    p.add_argument(
        "--from", dest="start", default="$", help="entry ID to start after (default: new only)"
    )
    p.add_argument(
        "--count", type=count(0), default=0, help="stop after this many entries (0: never)"
    )
    p.add_argument("--seconds", type=duration, default=0, help="stop after this long")
    add_keyring_argument(p, "decrypt encrypted payloads")
    p = command("dlq", cmd_dlq, "dead letters: dlq list|replay|purge STREAM [ID]", stream=False)
    p.add_argument("action", choices=["list", "replay", "purge"])
    p.add_argument("stream")
    p.add_argument("id", nargs="?", help="replay: one dead letter ID (default: all)")
    p.add_argument("--count", type=count(1), default=100, help="list: at most this many (100)")
    p.add_argument("--full", action="store_true", help="list: whole tracebacks")
    add_keyring_argument(p, "list: check that encrypted letters decrypt; replay: encrypt again "
                         "with its current key what an older key encrypted")  # fmt: skip
    p = command("stop-message", cmd_stop_message, "stop one entry ID for every consumer")
    p.add_argument("id")
    p = command("resume-message", cmd_resume_message, "resume a stopped entry ID")
    p.add_argument("id")
    p = command("terminate", cmd_terminate, "delete the stream, its groups and streamq's keys")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--keep-dead-letters", action="store_true")
    p = command("cleanup", cmd_cleanup, "remove entries every group has acknowledged")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--max-length", type=count(0), default=0, help="keep at least this many entries")
    p.add_argument(
        "--min-retention", type=duration, default=0, help="keep entries younger than this (s)"
    )
    p.add_argument(
        "--beyond-pending",
        action="store_true",
        help="also remove acknowledged entries above a pending one (the pending ones stay)",
    )
    return parser


def _confirm(args: argparse.Namespace) -> None:
    if args.command == "terminate" and not args.yes:
        if not sys.stdin.isatty():
            raise CliError("terminate deletes the stream: confirm with --yes", EXIT_USAGE)
        question = f"Delete stream {one_line(args.stream)!r}, its groups and streamq's keys?"
        answer = input(f"{question} [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CliError("not terminated", EXIT_FAILED)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in (
            "server",
            "dashboard",
            "run",
            "asyncapi",
            "compat",
        ):  # not a request to Redis
            return int(args.func(args))
        _confirm(args)
        coro: Callable[[argparse.Namespace], Coroutine[Any, Any, str]] = args.func
        output = anyio.run(coro, args)
    except CliError as e:
        return fail(str(e), e.code)
    except BrokenPipeError:  # the reader went away (`streamq tail ... | head -1`): done
        return reader_gone()
    except (StreamqError, OSError) as e:
        return fail(*describe_error(e))
    except KeyboardInterrupt:
        return 130
    if output:
        try:
            print(terminal_safe(output), flush=True)
        except BrokenPipeError:
            return reader_gone()
    return 0
