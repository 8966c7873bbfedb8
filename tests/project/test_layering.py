"""The dependency rules of ARCHITECTURE.md, checked by parsing streamq's imports with ``ast``.

* ``streamq.wire`` (the Redis boundary) imports nothing of the parts built on it.
* Nothing outside ``streamq.cli`` imports ``streamq.cli``.
* The parts (sub-packages and top-level modules) import each other without a cycle,
  type-only imports included; ``streamq/__init__.py`` is imported by nobody inside the
  package.
* streamq's modules import each other without a cycle, type-only imports included: a
  part that needs another's type takes a callable or a protocol of public members.
* No Protocol outside the consumer engine names a private member: a part holds what it
  uses instead of a mixin declaring what the class it is mixed into must have.
* An import of streamq's own modules inside a function says why on its line or the two
  lines above (a comment): only optional extras and rarely used machinery load lazily.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import streamq

ROOT = Path(streamq.__file__).parent
ABOVE_WIRE = ("topic", "consume", "publish", "run", "cli", "dashboard", "spark")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. streamq.wire.permissions
    target: str  # the imported module (or package), e.g. streamq.topic.partitions
    line: int
    module_level: bool  # run when the module is imported
    type_only: bool  # under ``if TYPE_CHECKING:``


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> Iterator[Import]:
    source = module_name(path)
    tree = ast.parse(path.read_text(), str(path))

    def visit(node: ast.AST, module_level: bool, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("streamq"):
                        yield Import(source, alias.name, child.lineno, module_level, type_only)
            elif isinstance(child, ast.ImportFrom):
                target = resolve(source, path.name == "__init__.py", child)
                if target.startswith("streamq"):
                    for alias in child.names:
                        sub = f"{target}.{alias.name}"
                        known = sub.replace(".", "/")
                        is_module = (ROOT.parent / f"{known}.py").exists() or (
                            ROOT.parent / known / "__init__.py"
                        ).exists()
                        name = sub if is_module else target
                        yield Import(source, name, child.lineno, module_level, type_only)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from visit(child, module_level, True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, False, type_only)
            else:
                yield from visit(child, module_level, type_only)

    yield from visit(tree, True, False)


ALL = [i for path in sorted(ROOT.rglob("*.py")) for i in imports_of(path)]


def part(module: str) -> str:
    """``streamq.wire.client`` -> ``wire``; ``streamq.queue`` -> ``queue``; ``streamq`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return found


def test_the_parser_sees_imports() -> None:
    # a rule checked on no imports would pass for the wrong reason
    assert any(i.source == "streamq.queue" and part(i.target) == "consume" for i in ALL)
    assert any(not i.module_level for i in ALL) and any(i.type_only for i in ALL)


def test_wire_imports_nothing_built_on_it() -> None:
    bad = [i for i in ALL if part(i.source) == "wire" and part(i.target) in ABOVE_WIRE]
    assert bad == []


def test_nothing_below_the_cli_imports_it() -> None:
    bad = [i for i in ALL if part(i.target) == "cli" and part(i.source) != "cli"]
    assert bad == []


def test_no_cycle_between_parts_type_only_imports_included() -> None:
    edges = {
        (part(i.source), part(i.target))
        for i in ALL
        if i.module_level and part(i.source) != part(i.target)
        if i.source != "streamq"  # the package's façade imports its parts, not the reverse
    }
    assert cycles(edges) == []


def test_no_cycle_between_modules_type_only_imports_included() -> None:
    edges = {
        (i.source, i.target)
        for i in ALL
        if i.module_level and i.source != i.target
        if "streamq" not in (i.source, i.target)  # the package's public names, above all
        if not i.source.startswith(f"{i.target}.")  # a module of a package names its package
    }
    assert cycles(edges) == []


def test_function_level_imports_say_why() -> None:
    silent = []
    for i in ALL:
        if i.module_level:
            continue
        lines = (ROOT.parent / (i.source.replace(".", "/") + ".py")).read_text().splitlines()
        if not any("#" in line for line in lines[i.line - 3 : i.line]):
            silent.append(f"{i.source}:{i.line} imports {i.target}")
    assert silent == []


def private_members_of_protocols(path: Path) -> Iterator[str]:
    """``Class._member`` for each private member a Protocol in ``path`` declares."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ClassDef):
            continue
        if not any(ast.unparse(base).endswith("Protocol") for base in node.bases):
            continue
        for member in node.body:
            if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                name = member.target.id
            elif isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = member.name
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                yield f"{node.name}.{name}"


def test_no_protocol_names_another_class_private_members() -> None:
    # the parts of a queue hold what they use; a Protocol of what a mixin needs of the
    # class it is mixed into would name that class's private state
    named = {
        module_name(path): found
        for path in sorted(ROOT.rglob("*.py"))
        if (found := list(private_members_of_protocols(path)))
        if not module_name(path).startswith("streamq.consume")  # the consumer engine's own
    }
    assert named == {}
