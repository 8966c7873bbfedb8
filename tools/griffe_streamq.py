"""A Griffe extension for the API reference (mkdocs.yml): streamq's docstrings as the site
shows them.

- Sphinx cross-reference roles (``:meth:`stop```, ``:class:`~streamq.Router```) become
  code spans (``stop()``, ``Router``): Griffe's Sphinx parser reads the fields
  (``:param:``, ``:raises:``), not the roles, which the page would show as written.
- A ``**unknown: Never`` parameter (there to make a misspelt keyword a type error) is left
  out of the signatures: it accepts nothing.
- A façade's one-line delegation, which has no docstring in its source, shows the docstring
  it is given when its module is imported (``streamq._facade_docs.adopt_docstrings``: the
  part's), which Griffe, reading the source, does not see.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(meth|func|class|attr|exc|mod|data|obj|const):`([^`]+)`")
CALLABLE_ROLES = {"meth", "func"}


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx role written as a code span, as Sphinx would show it."""
    return ROLE.sub(_code_span, text)


def _code_span(match: re.Match[str]) -> str:
    role, target = match.group(1), match.group(2).strip()
    if target.endswith(">") and "<" in target:  # :role:`title <target>`
        shown = target.split("<", 1)[0].strip()
    else:
        target = target.lstrip("!")
        shown = target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target
        if role in CALLABLE_ROLES and not shown.endswith(")"):
            shown += "()"
    return f"`{shown}`"


class StreamqDocstrings(griffe.Extension):
    """Plain roles in every docstring; no ``**unknown: Never`` in any signature."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        if func.docstring is None:
            adopted = _adopted_docstring(func.path)
            if adopted:
                func.docstring = griffe.Docstring(plain_roles(adopted), parent=func)
        refusing = [
            p.name
            for p in func.parameters
            if p.kind is griffe.ParameterKind.var_keyword and str(p.annotation) == "Never"
        ]
        for name in refusing:
            del func.parameters[name]


def _adopted_docstring(path: str) -> str | None:
    """The docstring of the function at ``path`` once its module is imported, if any."""
    try:
        return inspect.getdoc(griffe.dynamic_import(path))
    except (ImportError, AttributeError):  # not importable here: as the source says
        return None
