"""Serving the dashboard with uvicorn on a socket bound here, so that the address printed
is the one listened on (port 0 picks a free port) before the first request arrives."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv6 if ``host`` is an IPv6 address).

    Raises OSError if the address is taken or not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def uvicorn_server(app: ASGIApp, *, handle_signals: bool = True) -> uvicorn.Server:
    """A uvicorn server for ``app``: HTTP only (no websockets), quiet access log.

    ``handle_signals=False``: leave SIGINT/SIGTERM to the caller (who sets
    ``should_exit``), for a server that is one task among others.
    """
    config = uvicorn.Config(
        app, ws="none", lifespan="on", log_level="warning", access_log=False,
        server_header=False, proxy_headers=False,
    )  # fmt: skip
    return uvicorn.Server(config) if handle_signals else _SignalFreeServer(config)


class _SignalFreeServer(uvicorn.Server):
    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
