"""``streamq server``: the shared embedded server, a private one, an embedded cluster or
an embedded Sentinel set.

``streamq server`` attaches to the machine's shared server (the default of every process
without a URL), starting it if nobody runs it, prints its URL and holds it until SIGTERM,
SIGHUP or Ctrl-C (then it stops if this was its last user). ``streamq server stop`` stops
it whoever uses it; ``streamq server status`` shows it. ``--private`` (or ``--appendonly``)
runs a server of the command's own instead, ``--cluster N`` a cluster (one URL per node,
masters first), ``--sentinel`` a master, replicas and three sentinels (the
``redis+sentinel://`` URL); all of these stop with the command.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from ..config import ENV_URL
from ..errors import ConfigError
from ..server.cluster import ENV_CLUSTER_URL, EmbeddedCluster
from ..server.sentinel import ENV_SENTINEL_URL, EmbeddedSentinel
from ..server.single import EmbeddedServer
from .arguments import port_number
from .shared_server import shared_server_command


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="start", choices=["start", "stop", "status"],
        help="the shared server: attach or start it (default), stop it, show it",
    )  # fmt: skip
    parser.add_argument(
        "--private", action="store_true", help="a server of this command's own, not the shared one"
    )
    parser.add_argument(
        "--port", type=port_number, default=None,
        help="the server's port (the shared one's if this starts it); with --cluster the "
        "first node's (PORT+i each)",
    )  # fmt: skip
    parser.add_argument("--appendonly", action="store_true", help="persist with AOF")
    parser.add_argument(
        "--cluster", type=int, default=None, metavar="N", help="a Redis Cluster of N masters"
    )
    parser.add_argument(
        "--sentinel", action="store_true", help="a master, replicas and three sentinels"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=None,
        metavar="R",
        help="with --cluster: replicas per master (0); with --sentinel: replicas (1)",
    )


def cmd_server(args: argparse.Namespace) -> int:
    """Run until a signal; the processes never outlive the command."""
    if args.replicas is not None and args.cluster is None and not args.sentinel:
        raise ConfigError("--replicas needs --cluster N or --sentinel")
    if args.sentinel and (args.cluster is not None or args.port or args.appendonly):
        raise ConfigError("--sentinel takes only --replicas")
    private = args.private or args.appendonly or args.cluster is not None or args.sentinel
    if args.action != "start" or not private:
        return shared_server_command(args)
    for signum in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: stop the server, then exit
        signal.signal(signum, _interrupt)
    server: EmbeddedServer | EmbeddedCluster | EmbeddedSentinel
    try:
        if args.sentinel:  # a set stops itself when its start is interrupted
            server = EmbeddedSentinel(1 if args.replicas is None else args.replicas).start()
            print(server.url, flush=True)
            print(f"export {ENV_SENTINEL_URL}={server.url}", file=sys.stderr, flush=True)
        elif args.cluster is None:  # --private
            server = EmbeddedServer(port=args.port, appendonly=args.appendonly).start()
            _announce_server(server)
        else:  # a cluster stops itself when its start is interrupted
            server = EmbeddedCluster(args.cluster, args.replicas or 0, port=args.port).start()
            _announce_cluster(server)
    except KeyboardInterrupt:
        return 130
    try:
        while server.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _announce_server(server: EmbeddedServer) -> None:
    print(server.url, flush=True)
    print(f"export {ENV_URL}={server.url}", file=sys.stderr, flush=True)


def _announce_cluster(cluster: EmbeddedCluster) -> None:
    for url in cluster.urls:
        print(url, flush=True)
    nodes = cluster.nodes
    ports = {node.node_id: node.port for node in nodes}
    for node in nodes:
        slots = " ".join(f"{first}-{last}" for first, last in node.slots)
        of = f"of {ports.get(node.master_id or '', '?')}" if node.role == "replica" else slots
        print(f"# {node.port} {node.role} {of}", file=sys.stderr)
    print(f"export {ENV_CLUSTER_URL}={cluster.url}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
