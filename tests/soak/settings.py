"""The soak's settings: its command line, each option also read from ``SOAK_<NAME>``."""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Settings:
    messages: int
    consumers: int
    producers: int
    rate: float
    duration: float
    settle: float
    seed: int
    fail_rate: float
    poison_rate: float
    keep: bool
    server: str = "own"  # or "shared": the shared embedded server of a private home; "cluster"
    mode: str = "plain"  # or "ordered": keyed jobs, ordered=True, the order check; or
    # "exactly-once": the ledger's handlers, each effect checked once
    network: bool = True  # the processes reach the server through fault proxies
    database: str = ""  # exactly-once mode: the ledger's PostgreSQL, started by the soak


def parse_settings(argv: list[str], description: str | None) -> Settings:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m tests.soak.soak", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--messages", type=int, default=int(env("SOAK_MESSAGES", "30000")),
                   help="messages to publish (default 30000)")  # fmt: skip
    p.add_argument("--consumers", type=int, default=int(env("SOAK_CONSUMERS", "3")),
                   help="consumer processes (default 3)")  # fmt: skip
    p.add_argument("--producers", type=int, default=int(env("SOAK_PRODUCERS", "2")),
                   help="producer processes (default 2)")  # fmt: skip
    p.add_argument("--rate", type=float, default=float(env("SOAK_RATE", "250")),
                   help="messages per second, all producers together")  # fmt: skip
    p.add_argument("--duration", type=float, default=float(env("SOAK_DURATION", "240")),
                   help="cap in seconds on the publishing (and fault) phase")  # fmt: skip
    p.add_argument("--settle", type=float, default=float(env("SOAK_SETTLE", "90")),
                   help="bound in seconds on the wait for everything to settle")  # fmt: skip
    p.add_argument("--seed", type=int, default=int(env("SOAK_SEED", "0")) or None,
                   help="seeds the fault schedule and the payloads (default: random, printed)")  # fmt: skip
    p.add_argument("--fail-rate", type=float, default=float(env("SOAK_FAIL_RATE", "0.02")),
                   help="chance that a handler call raises a transient error")  # fmt: skip
    p.add_argument("--poison-rate", type=float, default=float(env("SOAK_POISON_RATE", "0.001")),
                   help="share of jobs whose handler always fails (must be dead-lettered)")  # fmt: skip
    p.add_argument("--keep", action="store_true", default=bool(env("SOAK_KEEP")),
                   help="keep the run directory even when the soak passes")  # fmt: skip
    p.add_argument("--server", choices=["own", "shared", "cluster"],
                   default=env("SOAK_SERVER", "own"),
                   help="own: a Valkey of the soak's (server-crash fault); shared: the shared "
                   "embedded server of a private STREAMQ_HOME (keeper-kill fault); cluster: "
                   "an embedded cluster of 3 masters with a replica each (master-kill fault)")  # fmt: skip
    p.add_argument("--mode", choices=["plain", "ordered", "exactly-once"],
                   default=env("SOAK_MODE", "plain"),
                   help="ordered: keyed jobs on a partitioned topic consumed with ordered=True, "
                   "per-key order checked (tests/soak/ordered.py); exactly-once: the ledger "
                   "of make demo-exactly-once (PostgreSQL, a Redis hash, receipts), each "
                   "transfer checked once in each (tests/soak/exactly_once.py)")  # fmt: skip
    p.add_argument("--network", choices=["faults", "direct"],
                   default=env("SOAK_NETWORK", "faults"),
                   help="faults: producers and consumers reach the server through fault "
                   "proxies (tests/soak/network.py; not on the shared server, which they find "
                   "without a URL); direct: no proxy, no network faults")  # fmt: skip
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 2**31)
    return Settings(a.messages, a.consumers, a.producers, a.rate, a.duration, a.settle,
                    seed, a.fail_rate, a.poison_rate, a.keep, a.server, a.mode,
                    a.network == "faults")  # fmt: skip
