"""No module cycles, in either language (the graphs are read by ``tests/helpers/module_graph.py``).

* Python: the package's modules import each other one way, counting every import statement
  wherever it stands: at import time, inside functions (deferred imports), under
  ``if TYPE_CHECKING:`` (types are dependencies too).
* Rust: the modules of each crate (``rust/core``, ``rust/python``, ``rust/wasm``) name each other's
  items one way: ``use crate::…``/``super::…`` and paths written in code, followed through
  re-exports to the module that defines the item. A test module (``mod tests``) is a module of
  its own: it may use what its parent's users use.
* The checkers find cycles planted on purpose (a check that cannot fail proves nothing).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests.helpers.module_graph import find_cycle, python_imports, rust_uses
from tests.helpers.paths import REPO

PACKAGE = REPO / "python" / "ortckpt"
CRATES = {
    "core": REPO / "rust" / "core" / "src",
    "python": REPO / "rust" / "python" / "src",
    "wasm": REPO / "rust" / "wasm" / "src",
}


# TEMPORARY, to be emptied by the rewrite of the aggregation modules (``aggregate``, ``_fedavg``,
# ``_robust``, ``_dask``: issue 30's round engine), which this list may only name: every other
# module is cycle-free as it stands. Exact edges (importer, imported), each still present (a
# stale entry fails the test). Remove an entry once its edge is gone.
def _cycle_message(cycle: list[str]) -> str:
    return "module cycle: " + " -> ".join(cycle)


def test_the_python_modules_import_each_other_one_way() -> None:
    graph = python_imports(PACKAGE, extra_modules=["ortckpt._native"])
    assert len(graph) > 30 and graph["ortckpt.io"], "the import graph was not read"
    # every kind of import counts: deferred (inside a function) and for types only
    assert "ortckpt._legacy" in graph["ortckpt._persist"], "a function-local import was not read"
    assert "ortckpt.state" in graph["ortckpt._types"], "an `if TYPE_CHECKING:` import was not read"
    cycle = find_cycle(graph)
    assert cycle is None, _cycle_message(cycle)


@pytest.mark.parametrize("crate", sorted(CRATES))
def test_the_rust_modules_use_each_other_one_way(crate: str) -> None:
    graph = rust_uses(CRATES[crate])
    assert len(graph) > 5 and any(graph.values()), f"the module graph of rust/{crate} was not read"
    if crate == "core":
        # read through re-exports (`crate::Error` is error.rs's) and from paths written in code
        assert "error" in graph["aggregate/round"] and "values" in graph["aggregate/kernel"], graph
        assert "aggregate/select/kernel" in graph["aggregate/select"], "a directory module was not read"
        assert "aggregate/round" in graph["aggregate/stream::tests"], "a test module was not read"
    cycle = find_cycle(graph)
    assert cycle is None, f"rust/{crate}: " + _cycle_message(cycle)


def test_the_browser_viewer_does_not_import_aggregation() -> None:
    """The viewer decodes values through the core's ``values`` module, not the aggregation's."""
    sources = sorted(CRATES["wasm"].rglob("*.rs"))
    assert sources
    users = [p.name for p in sources if "ortckpt_core::aggregate" in p.read_text(encoding="utf-8")]
    assert users == [], users


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_the_rust_checker_finds_planted_cycles(tmp_path: Path) -> None:
    # b names a's item in code (no `use`); a reaches b's through the root's re-export
    direct = _write(
        tmp_path / "direct",
        {
            "lib.rs": "mod a;\nmod b;\npub use b::Thing;\n",
            "a.rs": "use crate::Thing;\npub struct Other(Thing);\n",
            "b.rs": "pub struct Thing;\nfn f() -> crate::a::Other { todo!() }\n",
        },
    )
    assert find_cycle(rust_uses(direct)) in (["a", "b", "a"], ["b", "a", "b"])
    # through a directory module, `super::`, a group import and a comment that must not count
    nested = _write(
        tmp_path / "nested",
        {
            "lib.rs": "pub mod outer;\n",
            "outer/mod.rs": "mod left;\nmod right;\npub use left::L;\n// crate::outer::right::R\n",
            "outer/left.rs": "use super::{right::R, L as _};\npub struct L(R);\n",
            "outer/right.rs": 'pub struct R;\nconst S: &str = "crate::x";\nfn g(_: super::L) {}\n',
        },
    )
    cycle = find_cycle(rust_uses(nested))
    assert cycle is not None and set(cycle) == {"outer/left", "outer/right"}, cycle
    # a test module is its own module: using what uses its parent is no cycle
    tests_only = _write(
        tmp_path / "tests_only",
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n",
            "b.rs": "use crate::a::A;\npub struct B(A);\n",
        },
    )
    graph = rust_uses(tests_only)
    assert graph["a::tests"] == {"b"} and graph["b"] == {"a"}, graph
    assert find_cycle(graph) is None


def test_the_python_checker_finds_planted_cycles(tmp_path: Path) -> None:
    package = _write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "a.py": "def f() -> None:\n    from . import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n",
            "c.py": "import pkg.a\n",
        },
    )
    graph = python_imports(package)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": set()}) is None
    assert find_cycle({"x": {"x"}}) == ["x", "x"]


#: The concerns, lowest first: a module may import its own concern's modules and those below it.
LAYERS = ("model", "formats", "deploy", "federated")
#: Modules at the top that open onto every concern: the package (its lazy names), the public
#: import paths kept from before the grouping, and the command line.
DOORS = ("__init__", "__main__", "cli", "conversions", "onnx_io", "adapters", "aggregate", "flower")


def _layer(module: str) -> str | None:
    """The concern of ``ortckpt.<...>``: a group's subpackage, None for a door, "model" otherwise."""
    parts = module.split(".")[1:] or ["__init__"]
    if parts[0] in LAYERS:
        return parts[0]
    return None if parts[0] in DOORS else "model"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a concern into one above it (``importer -> imported``)."""
    found = []
    for importer, imported in sorted(graph.items()):
        own = _layer(importer)
        for target in sorted(imported):
            theirs = _layer(target)
            if own is not None and theirs is not None and LAYERS.index(theirs) > LAYERS.index(own):
                found.append(f"{importer} -> {target}")
    return found


def test_the_concerns_import_downward_only() -> None:
    """The model (state, io, errors, tensors, the front door) imports no group; formats import the
    model; deploy imports formats and the model; federated imports any of them (docs/architecture.md)."""
    graph = python_imports(PACKAGE, extra_modules=["ortckpt._native"])
    groups = {_layer(m) for m in graph}
    assert groups >= {*LAYERS, None}, groups
    assert "ortckpt.formats.conversions" in graph["ortckpt.federated.flower._strategy"], (
        "the graph was not read"
    )
    assert layer_violations(graph) == []
    # the check finds a planted upward import, and lets the doors import anything
    planted = {**graph, "ortckpt.state": graph["ortckpt.state"] | {"ortckpt.federated._round"}}
    assert layer_violations(planted) == ["ortckpt.state -> ortckpt.federated._round"]
    planted = {**graph, "ortckpt.formats._npz": graph["ortckpt.formats._npz"] | {"ortckpt.deploy._export"}}
    assert layer_violations(planted) == ["ortckpt.formats._npz -> ortckpt.deploy._export"]
    assert graph["ortckpt.aggregate"] == {"ortckpt.federated.aggregate"}


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
