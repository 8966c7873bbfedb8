"""`make demo-exactly-once`: its checks fail when they should (a transfer missing or doubled
in any of the three sinks, a balance off, a transfer written twice to the topic), and the
ledger stays exactly-once with its consumers SIGKILLed on an embedded Redis Cluster, where
the receipts (another slot than the topic's) go through the outbox."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from demos.exactly_once import Observed, expected_balances, problems
from demos.exactly_once_worker import Transfer
from demos.postgres import postgres_bin

ROOT = Path(__file__).resolve().parents[2]

PUBLISHED = {
    "1-0": Transfer(payer="ada", payee="bob", cents=500),
    "2-0": Transfer(payer="bob", payee="cat", cents=200),
    "3-0": Transfer(payer="cat", payee="ada", cents=50),
}


def observed(**changes: Any) -> Observed:
    """The sinks as a correct run leaves them, with ``changes``."""
    once = Counter(dict.fromkeys(PUBLISHED, 1))
    balances = expected_balances(PUBLISHED)
    correct = Observed(
        ledger=once.copy(), applied=once.copy(), receipts=once.copy(),
        pg_balances=dict(balances), redis_balances=dict(balances), stream_length=len(PUBLISHED),
    )  # fmt: skip
    return replace(correct, **changes)


def test_a_run_with_each_transfer_once_everywhere_passes() -> None:
    assert problems(PUBLISHED, observed()) == []
    assert expected_balances(PUBLISHED)["ada"] == -450


def test_a_transfer_applied_twice_or_missing_in_any_sink_fails() -> None:
    doubled = Counter({"1-0": 2, "2-0": 1, "3-0": 1})
    missing = Counter({"1-0": 1, "2-0": 1})
    assert problems(PUBLISHED, observed(ledger=doubled)) == [
        "PostgreSQL ledger: 1 transfers applied more than once: ['1-0']"
    ]
    assert problems(PUBLISHED, observed(applied=missing)) == [
        "Redis hash applied: 1 transfers missing: ['3-0']"
    ]
    assert problems(PUBLISHED, observed(receipts=Counter({**missing, "9-0": 1}))) == [
        "receipts: 1 transfers missing: ['3-0']",
        "receipts: 1 transfers never published: ['9-0']",
    ]


def test_a_balance_off_or_a_transfer_written_twice_to_the_topic_fails() -> None:
    balances = expected_balances(PUBLISHED)
    off = {**balances, "bob": balances["bob"] + 200}
    assert problems(PUBLISHED, observed(redis_balances=off)) == [
        "Redis balances differ: bob +5.00 (expected +3.00)"
    ]
    absent = {a: b for a, b in balances.items() if a != "ada"}
    assert problems(PUBLISHED, observed(pg_balances=absent)) == [
        "PostgreSQL balances differ: ada +0.00 (expected -4.50)"
    ]
    assert problems(PUBLISHED, observed(stream_length=4)) == [
        "the topic holds 4 transfers, 3 published"
    ]


def cluster_demo_keys(url: str) -> set[bytes]:
    with redis.RedisCluster.from_url(url) as client:
        return set(client.scan_iter(match="*demo-*", count=1000))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_ledger_is_exactly_once_with_sigkills_on_a_cluster(streamq_cluster_url: str) -> None:
    if postgres_bin() is None:
        pytest.skip("the ledger needs Debian's postgresql (make postgres-deps installs it)")
    env = {**os.environ, "STREAMQ_REDIS_URL": streamq_cluster_url}
    before = cluster_demo_keys(streamq_cluster_url)
    result = subprocess.run(
        [sys.executable, "-m", "demos.exactly_once", "--seconds", "3"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, f"the ledger failed on the cluster:\n{out}\n{result.stderr}"
    assert "SIGKILL worker-" in out and "exactly once: each of the" in out, out
    assert cluster_demo_keys(streamq_cluster_url) - before == set(), "the ledger left keys"
