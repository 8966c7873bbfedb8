"""streamq's version, in a module of its own so that parts of the package can name it
without importing the package's façade (kept equal to pyproject.toml's ``version``)."""

from __future__ import annotations

__version__ = "0.1.0"
