"""The ``streamq`` command line (entry point ``streamq = streamq.cli:main``)."""

from __future__ import annotations

from .main import main

__all__ = ("main",)
