"""The docstrings of a façade's delegating methods: each is its part's, kept with the part."""

from __future__ import annotations

import inspect


def adopt_docstrings(facade: type, *parts: type) -> None:
    """Give each public method of ``facade`` without a docstring the docstring of the
    method of the same name in ``parts`` (the first that has one)."""
    for name, member in vars(facade).items():
        if name.startswith("_") or not inspect.isfunction(member) or member.__doc__:
            continue
        for part in parts:
            doc = inspect.getdoc(getattr(part, name, None))
            if doc:
                member.__doc__ = doc
                break
