"""Every ```python block of README.md and of the documentation site (docs/) runs as written
against the test server.

A block runs as a script in a subprocess, with ``$STREAMQ_REDIS_URL`` set to the test
server, and must exit 0. An HTML comment on the line before its fence changes how:

- ``<!-- readme-test: pytest -->``: a test file, run with pytest (the shipped plugin);
- ``<!-- readme-test: spark -->``: a Spark job, run as a script under the ``spark`` marker;
- ``<!-- readme-test: postgres -->``: a script given ``$DATABASE_URL``, a PostgreSQL server
  the test starts (demos/postgres.py; skipped, saying why, where Debian's
  postgresql is not installed);
- ``<!-- readme-test: module NAME.py -->``: a module other blocks import: written as
  ``NAME.py`` beside every block, and imported on its own.

Nothing is skipped: the test ids list every block by its line and kind, and a block with
another fence name (``py``) or an unknown mark fails. Stream names in a block
(``stream="x"``, ``.option("stream", "x")``) get a fresh suffix per run, and the streams
are deleted afterwards, so blocks neither see each other's entries nor leave any.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from demos.postgres import postgres_bin, postgres_server
from streamq.testing import delete_stream_keys

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```(\S*)\s*$")
MARK = re.compile(r"^<!--\s*readme-test:\s*(?P<kind>[\w-]+)(?:\s+(?P<arg>\S+))?\s*-->$")
KINDS = {"script", "pytest", "spark", "module", "postgres"}
STREAM_NAME = re.compile(r"""(\bstream=|["']stream["'],\s*)(["'])([A-Za-z0-9_.:-]+)\2""")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    kind: str
    code: str
    module: str | None = None  # the file name of a "module" block
    section: str = ""  # the heading above it
    page: str = ""  # the document, relative to the repository

    @property
    def id(self) -> str:
        prefix = f"{self.page.removesuffix('.md')}:" if self.page else ""
        return f"{prefix}{self.section}-{self.module or self.kind}"

    @property
    def where(self) -> str:
        return f"{self.page or 'README.md'}:{self.line}"


def readme_blocks(text: str) -> list[Block]:
    """The ```python blocks of ``text``, each with the kind its mark gives (or "script")."""
    lines = text.splitlines()
    blocks: list[Block] = []
    section, i = "", 0
    while i < len(lines):
        if lines[i].startswith("#"):
            title = re.split(r"[(:]", lines[i].lstrip("#"))[0]  # "Spark (pip ...)" -> spark
            section = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) == "python":
            block = _block(lines, i, "\n".join(lines[i + 1 : end]) + "\n")
            blocks.append(dataclasses.replace(block, section=section))
        i = end + 1
    return blocks


def _block(lines: list[str], fence: int, code: str) -> Block:
    mark = MARK.match(lines[fence - 1].strip()) if fence else None
    if not mark:
        return Block(fence + 1, "script", code)
    kind, arg = mark.group("kind"), mark.group("arg")
    if kind not in KINDS:
        raise ValueError(f"line {fence}: unknown readme-test kind {kind!r}")
    if (kind == "module") != bool(arg and arg.endswith(".py")):
        raise ValueError(f"line {fence}: 'module NAME.py' names a file; others take none")
    return Block(fence + 1, kind, code, arg)


def page_blocks(page: Path) -> list[Block]:
    """The blocks of one document, each knowing its page."""
    name = str(page.relative_to(ROOT))
    return [dataclasses.replace(b, page=name) for b in readme_blocks(page.read_text())]


BLOCKS = [block for page in PAGES for block in page_blocks(page)]
MODULES = [b for b in BLOCKS if b.kind == "module"]


def _param(block: Block) -> object:
    if block.kind == "spark":
        marks = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(360)]
    else:
        marks = [pytest.mark.slow, pytest.mark.timeout(120)]
    return pytest.param(block, id=block.id, marks=marks)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_is_collected(page: Path) -> None:
    """No block escapes: every fence that looks like Python is a ```python block, every
    mark is right before one, and the kinds are known."""
    lines = page.read_text().splitlines()
    blocks = page_blocks(page)
    pythonish = [n for n, line in enumerate(lines, 1) if re.match(r"^```\s*py", line)]
    assert pythonish == [b.line for b in blocks], f"{page.name}: a fence not spelt ```python"
    marks = [n for n, line in enumerate(lines, 1) if "readme-test" in line]
    assert marks == [b.line - 1 for b in blocks if b.kind != "script"], "a stray mark"


def test_the_documents_hold_examples() -> None:
    assert len(PAGES) >= 20, PAGES
    assert len(BLOCKS) >= 15, [b.id for b in BLOCKS]
    assert len({b.id for b in BLOCKS}) == len(BLOCKS), "two blocks of one kind in a section"
    # the example handlers/ are the demos', not installed: a snippet must not need them
    assert not [b.id for b in BLOCKS if re.search(r"^\s*(from|import) handlers\b", b.code, re.M)]


def test_the_collector_reads_marks_and_fences() -> None:
    text = "\n".join(
        [
            "```python", "a = 1", "```", "```sh", "ls", "```",
            "<!-- readme-test: module m.py -->", "```python", "B = 2", "```",
            "<!-- readme-test: spark -->", "```python", "import m", "```",
        ]
    )  # fmt: skip
    blocks = readme_blocks("## A part: more (and more)\n" + text)
    assert [(b.line, b.kind, b.module, b.code, b.id) for b in blocks] == [
        (2, "script", None, "a = 1\n", "a-part-script"),
        (9, "module", "m.py", "B = 2\n", "a-part-m.py"),
        (13, "spark", None, "import m\n", "a-part-spark"),
    ]
    with pytest.raises(ValueError, match="unknown readme-test kind"):
        readme_blocks("<!-- readme-test: skip -->\n```python\npass\n```")


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A PostgreSQL server for the ``postgres`` blocks."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("Debian's postgresql is not installed (make test installs it: "
                    "apt-get install postgresql)")  # fmt: skip
    with postgres_server(bin_dir) as url:
        yield url


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs(
    block: Block, redis_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    code, streams = fresh_stream_names(block.code)
    for module in MODULES:
        (tmp_path / str(module.module)).write_text(module.code)
    env = {**os.environ, "STREAMQ_REDIS_URL": redis_url, "METRICS_PORT": "0"}
    if block.kind == "postgres":
        env["DATABASE_URL"] = request.getfixturevalue("database_url")
    if block.kind == "module":
        command = [sys.executable, "-c", f"import {Path(str(block.module)).stem}"]
    elif block.kind == "pytest":
        (tmp_path / "test_docs_block.py").write_text(code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command.append("test_docs_block.py")
    else:
        (tmp_path / "docs_block.py").write_text(code)
        command = [sys.executable, "docs_block.py"]
    timeout = 300 if block.kind == "spark" else 60
    try:
        result = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        for stream in streams:
            delete_stream_keys(redis_url, stream)
    assert result.returncode == 0, (
        f"{block.where} block ({block.kind}) failed:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    if block.kind == "pytest":
        assert re.search(r"\b[1-9]\d* passed\b", result.stdout), result.stdout


def fresh_stream_names(code: str) -> tuple[str, list[str]]:
    """``code`` with each stream name literal given a fresh suffix, and the new names."""
    suffix = uuid.uuid4().hex[:8]
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        prefix, quote, name = match.groups()
        fresh = names.setdefault(name, f"{name}-{suffix}")
        return f"{prefix}{quote}{fresh}{quote}"

    return STREAM_NAME.sub(rename, code), list(names.values())
