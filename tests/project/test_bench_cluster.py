"""`make bench`'s cluster figures run and say what the issue asks: cluster_consume with one
and two consumer processes, each with its ratio to consume_single of the same run."""

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
def test_cluster_bench_prints_both_figures_with_their_ratios() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--msgs", "3000", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
        # the bench starts its own servers (a single node as the yardstick, a cluster)
        env={k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"},
    )  # fmt: skip
    assert result.returncode == 0, f"bench.cluster failed:\n{result.stdout}\n{result.stderr}"
    figures = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(f["bench"], f["processes"]) for f in figures] == [
        ("cluster_consume", 1),
        ("cluster_consume", 2),
    ], result.stdout
    for figure in figures:
        assert figure["msgs_per_s"] > 0 and figure["ratio_to_consume_single"] > 0, figure
        assert figure["partitions"] == 6 and figure["masters"] == 3, figure
    assert figures[1]["ratio_to_one_process"] > 0, figures[1]
