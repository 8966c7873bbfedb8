"""Installing from a checkout: `make setup`'s editable install is a plain path entry, found
by explicit package discovery, without setuptools' warning about folders named like the
package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_editable_install_is_a_path_entry_without_warnings(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: the checkout's own build/ and egg-info stay as they are
    for name in ("streamq", "handlers", "demos"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    prefix = tmp_path / "prefix"
    # --ignore-installed: pip would otherwise uninstall the streamq of the environment that
    # runs the suite before installing the copy into the prefix
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-v",
         "--ignore-installed", "--prefix", str(prefix), "-e", str(source)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "meta path finder" not in output and "same name as your package" not in output
    (pth,) = prefix.glob("lib/python*/site-packages/__editable__.streamq-*.pth")
    assert Path(pth.read_text().strip()) == source


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_passes_twine_check(tmp_path: Path) -> None:
    """What ``make dist`` builds is a package an index would take (``twine check``): the
    README renders as its long description, and the metadata is complete."""
    pytest.importorskip("twine", reason="twine comes with the [dev] extra")
    source = tmp_path / "src"  # a copy: the checkout's own build/ and egg-info stay as they are
    shutil.copytree(ROOT / "streamq", source / "streamq",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
         str(out), str(source)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("streamq-*.whl")
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr
