"""The project's documents and sources hold no leftover merge-conflict markers (README.md
held one for a session: both versions of a paragraph, one after the other)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)
TEXT = (".md", ".py", ".toml", ".html", ".js", ".css", ".cfg", ".txt", ".sh", ".yml")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if name.endswith(TEXT) or name == "Makefile"]


@pytest.mark.slow
def test_no_file_holds_a_merge_conflict_marker() -> None:
    files = tracked_text_files()
    assert any(f.name == "README.md" for f in files), "git ls-files listed no README.md"
    marked = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in files
        for text in [path.read_text(errors="replace")]
        for m in MARKER.finditer(text)
    ]
    assert not marked, f"merge-conflict markers left in: {', '.join(marked)}"
