"""``streamq run module:attr``: run a service's handlers in supervised worker processes
(:mod:`streamq.run`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio

from ..config import ENV_URL, env_url
from ..errors import ConfigError
from ..logs import LOG_FORMATS, configure_logging
from ..run.http import ListenError
from ..run.names import check_names_free
from ..run.supervisor import SHUTDOWN_MARGIN, RunOptions, Supervisor
from ..run.target import load_target, uses_default_server
from ..server.shared import shared_url
from ..wire.urls import redact
from .arguments import count, port_number

log = logging.getLogger("streamq.run")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="module:attr, a MessageQueue, an App or a function returning one")
    p.add_argument("--workers", type=count(1), default=1, metavar="N", help="worker processes (1)")
    p.add_argument(
        "--name", metavar="NAME",
        help="consumer names NAME-0, NAME-1, ... (default: each queue's consumer name, or the "
        "host name, then -<slot>); one live process per name in a group",
    )  # fmt: skip
    p.add_argument("--app-dir", default=".", help="where to import the module from (.)")
    p.add_argument("--reload", action="store_true", help="restart the workers on code changes")
    p.add_argument(
        "--reload-dir", action="append", default=[], metavar="DIR",
        help="with --reload: a directory to watch (repeatable; default --app-dir)",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=port_number, metavar="P", help="serve /metrics for all workers"
    )
    p.add_argument("--health-port", type=port_number, metavar="P", help="serve /livez and /readyz")
    p.add_argument(
        "--host", default="127.0.0.1",
        help="address of the metrics and health endpoints (0.0.0.0 in a container)",
    )  # fmt: skip
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)
    p.add_argument("--log-format", default="text", choices=LOG_FORMATS)


def cmd_run(args: argparse.Namespace) -> int:
    """Check the target here (a clear error before N workers fail alike), then supervise."""
    configure_logging(args.log_level, args.log_format)
    if getattr(args, "url", None):
        os.environ[ENV_URL] = args.url  # for the queues without a URL of their own
    try:
        options = RunOptions(
            args.target, workers=args.workers, name=args.name, app_dir=args.app_dir,
            reload=args.reload,
            reload_dirs=args.reload_dir, host=args.host, metrics_port=args.metrics_port,
            health_port=args.health_port, log_level=args.log_level, log_format=args.log_format,
        )  # fmt: skip
        _prepare(options)
    except ConfigError as e:
        print(f"streamq: {redact(str(e))}", file=sys.stderr)
        return 2
    try:
        return anyio.run(Supervisor(options).run)
    except ListenError as e:  # an endpoint's port: not the Redis server, not bad usage
        print(f"streamq: {e}", file=sys.stderr)
        return 1


def _prepare(options: RunOptions) -> None:
    """Load the target once: fail fast on a bad one (unless reloading: the next change may
    fix it) or on consumer names live processes hold, size the shutdown wait by the
    queues' grace, and hold the shared server for the whole run if the queues use it, so
    that it outlives restarting workers."""
    try:
        app = load_target(options.target, options.app_dir)
        app.check_runnable()
    except ConfigError as e:
        if not options.reload:
            raise
        log.error("the target cannot run yet (%s); waiting for a change", e)
        log.debug("why the target cannot run", exc_info=True)
        return
    options.shutdown_timeout = max(mq.config.grace for mq in app.queues) + SHUTDOWN_MARGIN
    if uses_default_server(app) and not env_url():
        shared_url()
    anyio.run(check_names_free, app, options.workers, options.name)
