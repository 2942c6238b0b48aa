"""The module graphs of the Python package and of the Rust crates, and the search for a cycle in them.

* ``python_imports``: each module of a package and the package modules it imports anywhere in its
  source (at import time, inside functions, under ``if TYPE_CHECKING:``, in ``try``/``except``).
* ``rust_uses``: each module of a Rust crate (``src/``; a file's, or an inline ``mod name { … }``
  such as a test module, named ``file::name``) and the modules of the same crate whose items it
  names: ``use crate::…``/``super::…``/``self::…`` declarations and paths written in code
  (``crate::parallel::threads()``). A name is followed through the ``use`` declarations that
  re-export it (``crate::Error`` leads to ``error.rs``), so an edge points at the module that
  defines the item; a module made only of ``mod`` declarations and re-exports is never the target
  of an edge. Comments and strings are left out.
* ``find_cycle``: one cycle of a graph, as the list of its modules (the first one repeated at the end).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Graph = Mapping[str, Iterable[str]]


def find_cycle(graph: Graph) -> list[str] | None:
    """A cycle of ``graph`` (``[a, b, …, a]``), or ``None``; edges to unknown nodes are ignored."""
    edges = {node: sorted(set(targets)) for node, targets in graph.items()}
    state: dict[str, str] = {}
    for start in sorted(edges):
        if start in state:
            continue
        # iterative depth-first search: (node, index of its next edge)
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = "open"
        while stack:
            node, at = stack[-1]
            targets = edges[node]
            if at == len(targets):
                stack.pop()
                state[node] = "done"
                continue
            stack[-1] = (node, at + 1)
            nxt = targets[at]
            if nxt not in edges:
                continue
            if state.get(nxt) == "open":
                path = [n for n, _ in stack]
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                state[nxt] = "open"
                stack.append((nxt, 0))
    return None


# --- Python ---------------------------------------------------------------------------------------


def python_module_name(package: Path, path: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_imports(package: Path, extra_modules: Iterable[str] = ()) -> dict[str, set[str]]:
    """Every module of ``package`` and the package modules it imports, wherever in its source the
    import statement stands. ``extra_modules`` are modules without a source file (a native
    extension): leaves of the graph."""
    files = sorted(package.rglob("*.py"))
    modules = {python_module_name(package, f) for f in files} | set(extra_modules)
    graph: dict[str, set[str]] = {m: set() for m in extra_modules}
    for path in files:
        name = python_module_name(package, path)
        parent = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level > 0:
                    base = parent.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        found.discard(name)
        graph[name] = {m for m in found if m in modules}
    return graph


# --- Rust -----------------------------------------------------------------------------------------

# comments, strings (raw or not, byte or not) and character literals, removed before tokenizing;
# a lifetime ('a) is left alone
_NOISE = re.compile(
    r"""//[^\n]*
      | /\*(?:[^*]|\*(?!/))*\*/
      | b?r(?P<hashes>\#*)".*?"(?P=hashes)
      | b?"(?:[^"\\]|\\.)*"
      | b?'(?:[^'\\\n]|\\[^\n]+?)'
    """,
    re.VERBOSE | re.DOTALL,
)
_TOKEN = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*|::|\S")
_DEFINES = {"fn", "struct", "enum", "union", "trait", "type", "const", "static", "macro_rules"}
_NOT_NAMES = {"fn", "mut", "_", "!", "unsafe", "extern", "async"}
_PATH_ATTRIBUTE = "ortckpt_path_attribute_"
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass
class _Scope:
    """One Rust module (a file's, or one inline ``mod name { … }`` inside it)."""

    path: tuple[str, ...]
    node: str
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    bindings: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> path named by `use`
    globs: list[tuple[str, ...]] = field(default_factory=list)
    defined: set[str] = field(default_factory=set)
    references: list[tuple[str, ...]] = field(default_factory=list)


def _strip(source: str) -> tuple[str, list[str]]:
    """``source`` without comments, strings and characters, and the file names of its
    ``#[path = "…"]`` attributes (each attribute replaced by a token naming its index)."""
    paths: list[str] = []

    def keep(match: re.Match[str]) -> str:
        paths.append(match.group(1))
        return f" {_PATH_ATTRIBUTE}{len(paths) - 1} "

    kept = re.sub(r'#\[path\s*=\s*"([^"]*)"\s*\]', keep, source)
    return _NOISE.sub(" ", kept), paths


def _use_paths(tokens: list[str], at: int) -> tuple[list[tuple[tuple[str, ...], str | None]], int]:
    """The paths of the use tree starting at ``tokens[at]`` (each with the name it binds, ``*``
    for a glob), and the index after the tree."""
    found: list[tuple[tuple[str, ...], str | None]] = []

    def tree(i: int, prefix: tuple[str, ...]) -> int:
        segments = list(prefix)
        while i < len(tokens):
            t = tokens[i]
            if t == "{":
                i += 1
                while i < len(tokens) and tokens[i] != "}":
                    i = tree(i, tuple(segments))
                    if i < len(tokens) and tokens[i] == ",":
                        i += 1
                return i + 1
            if t == "*":
                found.append((tuple(segments), "*"))
                return i + 1
            if t == "::":
                i += 1
                continue
            if t in {",", ";", "}"}:
                break
            if t == "as":
                found.append((tuple(segments), tokens[i + 1]))
                return i + 2
            segments.append(t)
            i += 1
        if segments and segments != list(prefix):
            last = segments[-1]
            if last == "self":
                segments.pop()
                last = segments[-1] if segments else "self"
            found.append((tuple(segments), last))
        return i

    end = tree(at, ())
    return found, end


def _parse_file(
    path: Path, module: tuple[str, ...], node: str, scopes: dict[tuple[str, ...], _Scope]
) -> None:
    text, attributes = _strip(path.read_text(encoding="utf-8"))
    tokens = _TOKEN.findall(text)
    root = _Scope(module, node)
    scopes[module] = root
    stack: list[tuple[_Scope, int]] = [(root, 0)]  # scope, brace depth at which it closes
    depth = 0
    pending_path: str | None = None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        scope = stack[-1][0]
        if t.startswith(_PATH_ATTRIBUTE):
            pending_path = attributes[int(t.removeprefix(_PATH_ATTRIBUTE))]
        elif t == "{":
            depth += 1
        elif t == "}":
            if len(stack) > 1 and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        elif t == "mod" and i + 2 < len(tokens) and _IDENT.fullmatch(tokens[i + 1]):
            name = tokens[i + 1]
            child_path = (*scope.path, name)
            scope.children[name] = child_path
            if tokens[i + 2] == "{":
                inner = _Scope(child_path, f"{scope.node}::{name}")
                scopes[child_path] = inner
                depth += 1
                stack.append((inner, depth))
                i += 3
                continue
            if tokens[i + 2] == ";":
                directory = (
                    path.parent if path.name in {"mod.rs", "lib.rs", "main.rs"} else path.with_suffix("")
                )
                if pending_path is not None:
                    file = path.parent / pending_path
                    _parse_file(file, child_path, "/".join(child_path), scopes)
                else:
                    for candidate in (directory / f"{name}.rs", directory / name / "mod.rs"):
                        if candidate.exists():
                            _parse_file(candidate, child_path, "/".join(child_path), scopes)
                            break
                pending_path = None
            i += 2
            continue
        elif t == "use" and (i == 0 or tokens[i - 1] != "::"):
            paths, end = _use_paths(tokens, i + 1)
            for segments, name in paths:
                if name == "*":
                    scope.globs.append(segments)
                elif name is not None:
                    scope.bindings[name] = segments
                scope.references.append(segments)
            i = end
            continue
        elif t in _DEFINES and i + 1 < len(tokens):
            j = i + 1
            while j < len(tokens) and tokens[j] in _NOT_NAMES:
                j += 1
            if j < len(tokens) and _IDENT.fullmatch(tokens[j]):
                scope.defined.add(tokens[j])
        elif (
            _IDENT.fullmatch(t.lstrip("$"))
            and tokens[i + 1 : i + 2] == ["::"]
            and (i == 0 or tokens[i - 1] != "::")
        ):
            # a path written in code (`crate::parallel::threads()`, `$crate::simd::…` in a macro)
            written = [t.lstrip("$")]
            j = i + 1
            while j + 1 < len(tokens) and tokens[j] == "::" and _IDENT.fullmatch(tokens[j + 1]):
                written.append(tokens[j + 1])
                j += 2
            scope.references.append(tuple(written))
            i = j
            continue
        i += 1


class _Crate:
    def __init__(self, src: Path) -> None:
        self.scopes: dict[tuple[str, ...], _Scope] = {}
        root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
        _parse_file(root, (), "lib", self.scopes)

    def resolve(
        self, at: tuple[str, ...], segments: tuple[str, ...], seen: frozenset[object] = frozenset()
    ) -> tuple[str, ...] | str | None:
        """Where ``segments``, written in module ``at``, lead: a module's path (a tuple), the node
        (file) defining the item they name (a string), or ``None`` (another crate, or unknown)."""
        if (at, segments) in seen or not segments:
            return None
        seen = seen | {(at, segments)}
        first, rest = segments[0], segments[1:]
        if first == "crate":
            cur: tuple[str, ...] = ()
        elif first == "self":
            cur = at
        elif first == "super":
            cur = at[:-1]
            while rest and rest[0] == "super":
                cur, rest = cur[:-1], rest[1:]
        else:
            found = self._first(at, first, seen)
            if not isinstance(found, tuple):
                return found
            cur = found
        for name in rest:
            scope = self.scopes.get(cur)
            if scope is None:
                return None
            if name not in scope.children:
                return self._item(cur, name, seen)
            cur = scope.children[name]
        return cur

    def _first(self, at: tuple[str, ...], name: str, seen: frozenset[object]) -> tuple[str, ...] | str | None:
        """What the first segment of a path without ``crate``/``self``/``super`` names in ``at``."""
        scope = self.scopes.get(at)
        if scope is None:
            return None
        if name in scope.children:
            return scope.children[name]
        if name in scope.bindings and scope.bindings[name] != (name,):
            return self.resolve(at, scope.bindings[name], seen)
        if name in scope.defined:
            return scope.node
        for glob in scope.globs:
            target = self.resolve(at, glob, seen)
            if isinstance(target, tuple) and target != at and target in self.scopes:
                found = self._first(target, name, seen | {(at, name)})
                if found is not None:
                    return found
        return None

    def _item(self, at: tuple[str, ...], name: str, seen: frozenset[object]) -> tuple[str, ...] | str | None:
        scope = self.scopes[at]
        if name in scope.bindings and scope.bindings[name] != (name,):
            return self.resolve(at, scope.bindings[name], seen)
        if name not in scope.defined:
            for glob in scope.globs:
                target = self.resolve(at, glob, seen)
                if isinstance(target, tuple) and target in self.scopes:
                    other = self.scopes[target]
                    if name in other.defined or name in other.bindings or name in other.children:
                        return self._item(target, name, seen | {(at, name)})
        return scope.node

    def node_of(self, target: tuple[str, ...] | str | None) -> str | None:
        if isinstance(target, tuple):
            scope = self.scopes.get(target)
            return scope.node if scope else None
        return target

    def graph(self) -> dict[str, set[str]]:
        graph: dict[str, set[str]] = {}
        for path, scope in self.scopes.items():
            edges = graph.setdefault(scope.node, set())
            for segments in scope.references:
                node = self.node_of(self.resolve(path, segments))
                if node is not None and node != scope.node:
                    edges.add(node)
        return graph


def rust_uses(src: Path) -> dict[str, set[str]]:
    """The module graph of the crate whose sources are in ``src`` (nodes: ``lib`` for the root,
    else the module's path with ``/``, e.g. ``aggregate/round``)."""
    return _Crate(src).graph()
