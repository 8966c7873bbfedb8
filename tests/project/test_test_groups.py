"""`make test` runs the suite in three processes (`-n 3 --dist loadgroup`) and keeps the
Spark session's tests in one of them (tests/conftest.py marks them
``xdist_group("spark")``): one local SparkSession, one JVM. This checks that the installed pytest and pytest-xdist honour
the groups (pytest 9.2 with pytest-xdist 3.8 does not: pyproject.toml keeps pytest below)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")

@pytest.mark.parametrize("n", range({count}))
def test_where(n):
    pass
"""


@pytest.mark.timeout(120)
def test_tests_of_one_group_run_in_one_process(tmp_path: Path) -> None:
    for name, count in (("test_a.py", 6), ("test_b.py", 6)):
        (tmp_path / name).write_text(GROUPED.format(count=count))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
         "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"\[(gw\d+)\] .*PASSED \S+::test_where", done.stdout)  # -v: one line each
    assert len(ran) == 12, done.stdout
    assert len(set(ran)) == 1, f"one group's tests ran in {sorted(set(ran))}:\n{done.stdout}"
