#!/usr/bin/env python3
"""Run every Python and shell code block of the README and the docs, as a reader would.

    .venv/bin/python scripts/docs_code.py [PAGE.md ...]   # default: README, docs/*.md, examples/README

Each page runs in a new temporary directory holding copies of ``tests/data`` (the checkpoints,
models and adapter the blocks use: ``tests/data/artifacts``, made by ORT by
scripts/make_artifact_fixtures.py) and ``examples``; the blocks run in the page's order, in the
directory a ``<!-- docs-code: cwd DIR -->`` comment on the page names (default: the copy's root).
A block whose fence follows ``<!-- docs-code: in DIR -->`` runs in DIR instead (a command to run
from the repository's root, say). Python blocks share one namespace per page, as a reader's
session would; shell blocks (``sh``, ``bash``, ``shell``) run in ``bash -e -o pipefail``. Both get
the project's ``.venv/bin`` first on ``PATH`` (``ortckpt``, ``python``), ``HOME`` in the temporary
directory, and ``ORTCKPT_ORT_VENV`` (the ORT side venv, default ``.ort-venv``) for the blocks that
run devices. After the page, every copied file must be unchanged: a block never overwrites its
inputs.

A block is left out only when the comment right before its fence says so, with the reason:
``<!-- docs-code: skip: installs packages -->``. Blocks of other languages (``json``, ``js``,
``toml``, output without a language) are not programs and are not run.

Exit status 0 when every block ran; 1 otherwise, with the page, the block's line and its error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: What each page's temporary directory holds (copies): the files its blocks read.
INPUTS = ("tests/data", "examples")
RUN_LANGUAGES = {"python": "python", "sh": "shell", "bash": "shell", "shell": "shell"}

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,})(?P<lang>[\w+-]*)[^\n]*\n", re.M)
_SKIP = re.compile(r"<!--\s*docs-code:\s*skip:\s*(?P<reason>.*?)\s*-->\s*$")
_CWD = re.compile(r"<!--\s*docs-code:\s*cwd\s+(?P<dir>[^\s>]+)\s*-->")
_IN = re.compile(r"<!--\s*docs-code:\s*in\s+(?P<dir>[^\s>]+)\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    language: str  # as written after the fence ("" for none)
    code: str
    skip: str | None  # the reason it is not run, when its marker says so
    cwd: str | None  # where it runs, when its marker says (relative to the copy's root)

    @property
    def kind(self) -> str | None:
        """``"python"``, ``"shell"``, or None for a block that is not a program."""
        return RUN_LANGUAGES.get(self.language)

    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.language})"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with its skip marker (the comment on the line before)."""
    text = page.read_text(encoding="utf-8")
    found = []
    pos = 0
    while (opening := _FENCE.search(text, pos)) is not None:
        fence, indent = opening.group("fence"), opening.group("indent")
        closing = re.compile(rf"^{indent}{fence}`*[ \t]*$", re.M).search(text, opening.end())
        end = closing.start() if closing else len(text)
        code = "\n".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in text[opening.end() : end].split("\n")
        )
        before = text[: opening.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _SKIP.search(before)
        where = _IN.search(before)
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, opening.start()) + 1,
                language=opening.group("lang"),
                code=code,
                skip=marker.group("reason") if marker else None,
                cwd=where.group("dir") if where else None,
            )
        )
        pos = closing.end() if closing else len(text)
    return found


def working_dir(page: Path) -> str:
    """The directory (relative to the copy's root) a page's blocks run in."""
    match = _CWD.search(page.read_text(encoding="utf-8"))
    return match.group("dir") if match else "."


def default_pages(repo: Path = REPO) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md")), repo / "examples" / "README.md"]


def venv_bin() -> Path:
    """The project's ``.venv/bin`` (scripts/setup.sh), else the running interpreter's directory."""
    project = REPO / ".venv" / "bin"
    return project if (project / "python").exists() else Path(sys.executable).parent


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """This process's environment is ``env`` meanwhile (what Python blocks and their children see)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_python(block: Block, namespace: dict[str, object]) -> str | None:
    out = io.StringIO()
    try:
        code = compile(block.code, block.where(), "exec")
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
    except BaseException:  # a block's failure of any kind (SystemExit too) is the page's failure
        return traceback.format_exc(limit=-3)
    return None


def _run_shell(block: Block, env: dict[str, str]) -> str | None:
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        env=env,
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    if proc.returncode == 0:
        return None
    return (
        f"exit status {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


def run_page(page: Path, repo: Path = REPO) -> list[str]:
    """Runs the page's blocks in a temporary directory (see the module docstring); returns one
    message per failure (a failed block, or a copied input a block changed)."""
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ortckpt-docs-") as tmp:
        root = Path(tmp)
        for name in INPUTS:
            shutil.copytree(repo / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        before = _digests(root)
        cwd = root / working_dir(page)
        env = {
            **os.environ,
            "PATH": f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(root),
        }
        # the ORT side venv the Flower guide's devices run in: the project's, unless one is named
        env.setdefault("ORTCKPT_ORT_VENV", str(REPO / ".ort-venv"))
        namespace: dict[str, object] = {"__name__": "__main__"}
        with _cwd(cwd), _environ(env):
            for block in blocks(page):
                if block.kind is None or block.skip is not None:
                    continue
                with _cwd(cwd if block.cwd is None else root / block.cwd):
                    error = (
                        _run_python(block, namespace) if block.kind == "python" else _run_shell(block, env)
                    )
                if error is not None:
                    failures.append(f"{block.where()} failed:\n{error}")
        after = _digests(root)
        changed = sorted(name for name, digest in before.items() if after.get(name) != digest)
        if changed:
            failures.append(f"{page}: blocks overwrote or removed their inputs: {', '.join(changed)}")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", type=Path, help="Markdown pages (default: README, docs, examples)")
    args = ap.parse_args(argv)
    pages = args.pages or default_pages()
    failed = 0
    for page in pages:
        failures = run_page(page.resolve())
        ran = sum(1 for b in blocks(page) if b.kind and b.skip is None)
        print(f"{page}: {ran} blocks, {'ok' if not failures else 'FAILED'}")
        for failure in failures:
            print(failure, file=sys.stderr)
        failed += bool(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
