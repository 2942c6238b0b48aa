"""The package's modules import each other one way: no cycle among their import-time imports.

Imports inside functions (deferred on purpose, e.g. ``state.py``'s convenience methods) and under
``if TYPE_CHECKING:`` do not run at import time and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "ortckpt"


def _module_name(path: Path) -> str:
    parts = ["ortckpt", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_imports(path: Path, modules: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    found.discard(name)
    return {m for m in found if m in modules}


def test_no_import_cycle() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    # the native extension is a module too (a leaf: it imports nothing of the package)
    modules = {_module_name(f) for f in files} | {"ortckpt._native"}
    graph = {_module_name(f): _import_time_imports(f, modules) for f in files}
    graph["ortckpt._native"] = set()
    assert len(graph) > 30 and graph["ortckpt.io"], "the import graph was not read"

    state: dict[str, str] = {}

    def cycle_from(module: str, stack: list[str]) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                return [*stack[stack.index(dep) :], dep]
            if dep not in state:
                found = cycle_from(dep, stack)
                if found:
                    return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = cycle_from(module, [])
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_state_never_imports_io_or_its_users() -> None:
    """``io`` builds on ``state``; the state's own load/save methods go through ``_persist``, so not
    even a deferred import (inside a function) runs from ``state`` back up to ``io``."""
    source = (PACKAGE / "state.py").read_text(encoding="utf-8")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module:
            imported.add(node.module)
    assert imported, "state.py's imports were not read"
    assert not imported & {"io", "conversions", "aggregate", "compat", "onnx_io", "_sources"}, imported
