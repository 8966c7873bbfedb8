"""`make bench`'s flow-control figures run and say what the issue asks (bench/flow.py,
bench/priorities.py): rate-limit accuracy over 3 processes per type and per key, the
overhead of a limit that never binds as a ratio, the pause latency, a high level's latency
behind a low backlog and the low level's share; the limiter's bounds hold in the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_flow_bench_prints_every_figure_within_the_limiter_s_bounds() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.flow", "--quick", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
        env={k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"},  # its own server
    )  # fmt: skip
    assert result.returncode == 0, f"bench.flow failed:\n{result.stdout}\n{result.stderr}"
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    figures = {f["bench"]: f for f in lines}
    assert list(figures) == [
        "rate_limit_accuracy", "rate_limit_per_key", "rate_limit_overhead", "pause_latency_ms",
    ], result.stdout  # fmt: skip
    rate, per_key = figures["rate_limit_accuracy"], figures["rate_limit_per_key"]
    assert rate["processes"] == 3 and rate["seconds"] >= 3, rate
    # at most limit + burst - 1 in any second (RateLimit(500): burst 25), never idle
    assert rate["min_per_s"] > 0 and rate["max_per_s"] <= 524, rate
    assert per_key["keys"] == 5 and 0 < per_key["max_per_s"] <= 10, per_key
    assert figures["rate_limit_overhead"]["ratio_to_unlimited"] > 0
    pause = figures["pause_latency_ms"]
    assert pause["samples"] == 9 and pause["value"] <= 1000, pause


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_priority_bench_prints_the_latency_and_the_low_level_s_share() -> None:
    """bench.priorities (in ``make bench``): the high level's latency behind a low backlog,
    and the low level's share of the handler starts with every level backlogged, which the
    weighted rounds make the documented 1/7 (not a timing: a count of starts)."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.priorities", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
        env={k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"},  # its own server
    )  # fmt: skip
    assert result.returncode == 0, f"bench.priorities failed:\n{result.stdout}\n{result.stderr}"
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    figures = {f["bench"]: f for f in lines}
    assert list(figures) == ["priority_latency_ms", "priority_low_share"], result.stdout
    latency, share = figures["priority_latency_ms"], figures["priority_low_share"]
    assert latency["high"] == 200 and latency["low_waiting_at_end"] > 0, latency
    assert share["documented"] == 0.143 and 0.8 <= share["ratio_to_documented"] <= 1.25, share
    high, middle, low = share["starts_per_level"]
    assert high > middle > low > 0, share
