"""The Makefile has the targets users of goStream type (``make build``, ``make dist``,
``make test-errors``, ``make test-auto-stop``), each listed in .PHONY and in
docs/development.md; ``make test-errors`` selects exactly the tests ERROR_HANDLING.md's
rows cite, and every test a row cites exists."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.error_rows import DOCUMENT, cited_tests, file_of, node_ids

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("build", "dist", "test-errors", "test-auto-stop")
# what `make test-auto-stop` must run: a consumer stopping by itself when its stream or
# group is deleted or its topic terminated, in each mode
AUTO_STOP_TESTS = (
    "tests/consume/test_recovery.py::test_auto_stop_when_group_or_stream_disappears",
    "tests/consume/test_fanout.py::test_a_deleted_stream_stops_the_subscriber",
    "tests/consume/test_ordered.py::test_a_terminated_topic_stops_its_ordered_consumers",
    "tests/topic/test_control.py::test_terminate_stops_every_consumer_at_once_and_topic_is_reusable",
)


def _phony() -> set[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith(".PHONY:")]
    return set(line.removeprefix(".PHONY:").split())


@pytest.mark.parametrize("target", TARGETS)
def test_the_target_is_in_the_makefile_and_in_the_docs(target: str) -> None:
    assert target in _phony(), f"{target} is not in the Makefile's .PHONY"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^([a-z-]+ )*{re.escape(target)}( [a-z-]+)*:", makefile, re.M), (
        f"no rule {target}"
    )
    assert re.search(rf"`(make )?{re.escape(target)}`", (ROOT / "docs/development.md").read_text())


def test_every_test_an_error_handling_row_cites_exists() -> None:
    missing = []
    for cited in cited_tests(DOCUMENT.read_text()):
        if not Path(cited.file).name.startswith("test_"):
            continue
        path = file_of(cited)
        if path is None:
            missing.append(cited.file)
        elif cited.name is not None and cited.name not in _functions(path):
            missing.append(f"{cited.file}::{cited.name}")
    assert not missing, f"ERROR_HANDLING.md cites tests that do not exist: {missing}"


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_the_rows_cite_tests_of_every_part() -> None:
    folders = {Path(node).parts[1] for node in node_ids(DOCUMENT.read_text())}
    assert {"consume", "topic", "wire", "publish", "cli", "dashboard"} <= folders, folders


def _make_dry_run(target: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", target], cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_build_and_dist_make_the_wheel_and_the_sdist() -> None:
    for target in ("build", "dist"):
        assert "-m build" in _make_dry_run(target)


def _collected(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {line.split("[")[0] for line in result.stdout.splitlines() if "::" in line}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_test_errors_runs_the_cited_tests() -> None:
    assert "tests.helpers.error_rows" in _make_dry_run("test-errors")
    nodes = node_ids(DOCUMENT.read_text())
    collected = _collected(*nodes)
    functions = [node for node in nodes if "::" in node]
    assert set(functions) <= collected, set(functions) - collected


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_test_auto_stop_runs_the_auto_stop_tests() -> None:
    assert "-m auto_stop" in _make_dry_run("test-auto-stop")
    assert set(AUTO_STOP_TESTS) <= _collected("-m", "auto_stop", "tests")
