"""`make bench`'s flow-control figures run and say what the issue asks (bench/flow.py):
rate-limit accuracy over 3 processes per type and per key, the overhead of a limit that
never binds as a ratio, and the pause latency; the limiter's bounds hold in the run."""

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
