"""``streamq server [start|stop|status]`` for the shared embedded server
(:mod:`streamq.server.shared`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ..config import ENV_URL
from ..server.shared import SharedServer, server_status, state_home, stop_server


def shared_server_command(args: argparse.Namespace) -> int:
    if args.action == "stop":
        return _stop()
    if args.action == "status":
        return _status()
    return _attach(args.port)


def _stop() -> int:
    info = stop_server()
    if info is None:
        print(f"streamq: the shared server is not running (home {state_home()})", file=sys.stderr)
        return 1
    print(f"stopped the shared server {info.url} (data kept in {info.data_dir})")
    return 0


def _status() -> int:
    info, users = server_status()
    if info is None:
        print(f"streamq: the shared server is not running (home {state_home()})", file=sys.stderr)
        return 1
    print(f"{info.url}\ndata: {info.data_dir}\npid: {info.pid}\nusers: {users}")
    return 0


def _attach(port: int | None) -> int:
    """Hold the shared server until a signal; leaving stops it if this was its last user."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with SharedServer(state_home(), port=port) as server:
        how = "started" if server.started_here else "already running"
        print(server.url, flush=True)
        print(f"# shared server ({how}), data in {server.data_dir}", file=sys.stderr)
        print(f"export {ENV_URL}={server.url}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    return 0
