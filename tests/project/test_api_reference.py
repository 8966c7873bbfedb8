"""The API reference (docs/reference/api.md, mkdocstrings) documents every public name of
streamq and every public method and property of its classes, and renders them: no Sphinx
role shown as written, no ``**unknown: Never`` in a signature."""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import streamq

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:meth|func|class|attr|exc|mod|data|obj|const):`?[\w~.!]")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built as `make docs` builds it."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the [docs] extra)")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def inventory(site: Path) -> set[str]:
    """The names the site documents (its Sphinx inventory, objects.inv)."""
    raw = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):  # four lines of header, then the zlib-compressed entries
        header_end = raw.index(b"\n", header_end) + 1
    entries = zlib.decompress(raw[header_end:]).decode().splitlines()
    return {line.split(" ", 1)[0] for line in entries}


def public_members(cls: type) -> Iterator[str]:
    """The public methods and properties of ``cls`` that streamq defines (inherited ones
    included), not its data fields."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((c for c in cls.__mro__ if name in vars(c)), None)
        if owner is None or not owner.__module__.startswith("streamq"):
            continue
        value = inspect.getattr_static(owner, name)
        if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(value):
            yield name


def documented_as(names: set[str], qualified: list[str]) -> bool:
    return any(name in names for name in qualified)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_public_name_and_member_has_a_reference_entry(site: Path) -> None:
    names = inventory(site)
    missing = []
    for name in streamq.__all__:
        value = getattr(streamq, name)
        paths = [f"streamq.{name}", f"{getattr(value, '__module__', '')}.{name}"]
        if not documented_as(names, paths):
            missing.append(name)
            continue
        if inspect.isclass(value) and not issubclass(value, BaseException):
            missing += [
                f"{name}.{member}"
                for member in public_members(value)
                if not documented_as(names, [f"{path}.{member}" for path in paths])
            ]
    assert not missing, f"no entry in the API reference for: {', '.join(missing)}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_reference_shows_no_sphinx_role_and_no_refusing_parameter(site: Path) -> None:
    page = (site / "reference" / "api" / "index.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    roles = sorted({m.group(0) for m in ROLE.finditer(text)})
    assert not roles, f"Sphinx roles shown as written: {roles}"
    assert "**unknown" not in text and ": Never" not in text
