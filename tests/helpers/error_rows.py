"""The tests that prove ERROR_HANDLING.md's rows: its table's last column ("Proved by")
names them (``test_x.py::test_name``, ``::test_other`` of the same file, a whole file,
``spark/test_y.py::...``). ``make test-errors`` runs them:

    python -m tests.helpers.error_rows     # their pytest node IDs, one a line
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "ERROR_HANDLING.md"
TESTS = ROOT / "tests"
_CODE = re.compile(r"`([^`]+)`")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Cited:
    """A test a row names: its file (as written) and function (None: the whole file;
    a parametrized case named stands for all of the function's cases)."""

    file: str
    name: str | None = None


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the document's tables (header and rule lines left out);
    a ``|`` inside backticks does not split a cell."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or set(line) <= set("|- "):
            continue
        rows.append(_cells(line))
    return rows[1:] if rows and rows[0][0] == "Failure" else rows


def _cells(line: str) -> list[str]:
    cells: list[str] = []
    current: list[str] = []
    quoted = False
    for char in line.strip().strip("|"):
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    cells.append("".join(current).strip())
    return cells


def cited_tests(text: str) -> list[Cited]:
    """Every test the rows' last cells name, in the order written, each once."""
    found: dict[Cited, None] = {}
    for cells in table_rows(text):
        last_file: str | None = None
        for code in _CODE.findall(cells[-1]):
            file, sep, rest = code.partition("::")
            if file.endswith(".py"):
                last_file = file
            elif file or not sep or last_file is None:
                continue  # not a test (a make target, a setting)
            found[_cited(last_file, rest)] = None
    return list(found)


def _cited(file: str, rest: str) -> Cited:
    name = _NAME.match(rest)
    return Cited(file, name.group() if name else None)


def file_of(cited: Cited) -> Path | None:
    """The file under tests/ a citation names (by its name, or its folder and name)."""
    direct = TESTS / cited.file
    if direct.is_file():
        return direct
    matches = sorted(TESTS.rglob(Path(cited.file).name))
    return matches[0] if len(matches) == 1 else None


def node_ids(text: str) -> list[str]:
    """pytest node IDs of the cited tests (a whole file for a file alone)."""
    ids: dict[str, None] = {}
    for cited in cited_tests(text):
        path = file_of(cited)
        if path is None:
            continue
        node = str(path.relative_to(ROOT))
        if cited.name is not None:
            node += f"::{cited.name}"
        ids[node] = None
    return list(ids)


if __name__ == "__main__":
    sys.stdout.write("".join(f"{node}\n" for node in node_ids(DOCUMENT.read_text())))
