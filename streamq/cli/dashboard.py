"""``streamq dashboard``: serve the web dashboard in the foreground until Ctrl-C/SIGTERM.

It watches ``--url``, else ``$STREAMQ_REDIS_URL``, else the shared embedded server if it
runs: it then counts as one of that server's users until it exits, so the server is not
stopped under it. It prints the address on stdout once it listens, and on stderr the
server it watches (without the URL's password) and, when no token was given, the random
write token it made (like Jupyter's). ``--token`` is visible to other users in ``ps``:
prefer ``$STREAMQ_DASHBOARD_TOKEN``. ``--read-only`` refuses every change.
``--keyring-env VAR``: the dashboard decrypts encrypted payloads with the keyring held by
the environment variable ``VAR`` (``Keyring.from_env``), and a replay encrypts again with
its current key; without it, an encrypted payload is shown as such.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from ..config import ENV_URL, env_url
from ..errors import ConfigError
from ..server.shared import running_shared_url
from ..wire.urls import redact
from .arguments import add_keyring_argument, keyring_of, port_number

ENV_TOKEN = "STREAMQ_DASHBOARD_TOKEN"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8700
EXIT_USAGE, EXIT_FAILED = 2, 1


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help="0 picks a free port"
    )
    parser.add_argument(
        "--token", help=f"write token (default ${ENV_TOKEN}, else a random one, printed)"
    )
    parser.add_argument("--read-only", action="store_true", help="no token: nothing changes")
    parser.add_argument(
        "--asyncapi", metavar="MODULE:ATTR",
        help="a queue or App whose AsyncAPI document the dashboard serves and links",
    )  # fmt: skip
    add_keyring_argument(parser, "decrypt payloads on the dead-letter page (replays re-encrypt)")


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:  # extra [dashboard]: starlette, jinja2, uvicorn load only for this command
        from ..dashboard import create_app
        from ..dashboard.server import bind, is_loopback, url_of, uvicorn_server
    except ImportError as e:
        return _fail(f"the dashboard needs the [dashboard] extra ({e.name} is missing): "
                     "pip install 'streamq[dashboard]'", EXIT_USAGE)  # fmt: skip
    # the shared server, as for every command, held (a lease) until this process exits
    url = getattr(args, "url", None) or env_url() or running_shared_url()
    if not url:
        return _fail(f"no server: pass --url redis://host:port/db, set ${ENV_URL}, or start "
                     "the shared embedded server (streamq server)", EXIT_USAGE)  # fmt: skip
    token, made = _token(args)
    loopback = is_loopback(args.host)
    try:
        document = _asyncapi_of(args.asyncapi)
        keyring = keyring_of(args)
    except ConfigError as e:
        return _fail(str(e), EXIT_USAGE)
    try:
        app = create_app(
            url, token=token, allowed_hosts=_loopback_names() if loopback else None,
            asyncapi=document, keyring=keyring,
        )  # fmt: skip
        sock = bind(args.host, args.port)
    except ValueError as e:  # ConfigError names what is wrong, never the URL
        return _fail(redact(str(e)), EXIT_USAGE)
    except OSError as e:
        return _fail(f"cannot listen on {args.host}:{args.port}: {e}", EXIT_FAILED)
    _announce(app.state.server_url, token, made, loopback, args.host)
    if keyring is not None:  # the key IDs only, never a key
        kids = ", ".join(keyring.kids)
        print(f"decrypting with the keyring of ${args.keyring_env} (key IDs {kids}; "
              f"current {keyring.current})", file=sys.stderr)  # fmt: skip
    print(url_of(sock), flush=True)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for
    # the handlers it found: these make that a clean exit 0, as for `streamq server`.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_quietly)
    uvicorn_server(app).run(sockets=[sock])
    return 0


def _asyncapi_of(target: str | None) -> dict[str, Any] | None:
    """The AsyncAPI document of ``target`` (module:attr), None without one."""
    if target is None:
        return None
    # the App machinery and the document's builder load only for --asyncapi
    from .._asyncapi import asyncapi_document
    from ..run.target import load_target

    return asyncapi_document(load_target(target, "."))


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _token(args: argparse.Namespace) -> tuple[str | None, bool]:
    """The write token and whether it was made here."""
    # the [dashboard] extra loads only for this command
    from ..dashboard.security import new_token

    if args.read_only:
        return None, False
    given = args.token or os.environ.get(ENV_TOKEN)
    return (given, False) if given else (new_token(), True)


def _loopback_names() -> list[str]:
    from ..dashboard.app import LOOPBACK_HOSTS  # extra [dashboard], this command only

    return list(LOOPBACK_HOSTS)


def _announce(server: str, token: str | None, made: bool, loopback: bool, host: str) -> None:
    lines = [f"streamq dashboard for {server}"]
    if token is None:
        lines.append("read-only: started with --read-only")
    elif made:
        lines.append(f"write token (log in with it to change data): {token}")
    if not loopback:
        lines.append(
            f"warning: listening on {host}, not loopback: whoever reaches this port can read "
            "every topic, and the traffic (the token too) is not encrypted"
        )
    print("\n".join(lines), file=sys.stderr, flush=True)


def _fail(message: str, code: int) -> int:
    print(f"streamq: {redact(message)}", file=sys.stderr)
    return code
