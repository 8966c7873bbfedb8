"""The `streamq` command run as a shell user runs it, on a shared embedded server of the
tests' own."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata

# a shared embedded server of these tests' own, never the user's (~/.local/state/streamq)
HOME_ENV = {"STREAMQ_HOME": os.path.join(tempfile.gettempdir(), f"streamq-test-cli-{os.getpid()}")}
atexit.register(shutil.rmtree, HOME_ENV["STREAMQ_HOME"], True)


def streamq(
    *args: str, url: str | None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"} | HOME_ENV
    if url:
        env["STREAMQ_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "streamq.cli", *args],
        env=env, capture_output=True, text=True, timeout=60, input=stdin,
    )  # fmt: skip


def terminal_unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (controls, line and paragraph
    separators, right-to-left override), newlines aside."""
    return [
        c
        for c in text
        if c != "\n" and (unicodedata.category(c) in ("Cc", "Zl", "Zp") or c == "\u202e")
    ]
