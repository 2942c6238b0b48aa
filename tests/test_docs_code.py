"""Every Python and shell block of the README, the docs and examples/README.md runs, on the files the
repository ships (scripts/docs_code.py: a temporary directory with copies of tests/data and
examples, nothing overwritten); a block that is not run says why; and the check fails on a broken
block, a failing shell line, or a block that overwrites its input."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import docs_code  # scripts/docs_code.py (scripts/ is an import root of the tests)
import pytest

from tests.helpers.paths import REPO

PAGES = docs_code.default_pages(REPO)
#: Pages whose blocks start real components: the Flower guide runs a deployment whose devices run
#: onnxruntime-training (the ORT side venv), about a minute.
NEEDS_ORT = {"flower.md"}
#: Pages whose blocks use optional extras (the server's, Flower's): skipped, naming what is missing,
#: where those are not installed (the lowest-dependencies run installs the floors alone).
NEEDS_EXTRAS = {
    "federated.md": ("distributed", "dp_accounting", "safetensors", "onnx"),
    "flower.md": ("flwr",),
}
#: The most blocks left out (each says why); they are few, and stay few.
MAX_SKIPPED = 16


def run_check(*pages: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "docs_code.py"), *map(str, pages)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


def page_param(page: Path) -> object:
    marks = [pytest.mark.ort, pytest.mark.slow] if page.name in NEEDS_ORT else []
    return pytest.param(page, id=str(page.relative_to(REPO)), marks=marks)


@pytest.mark.parametrize("page", [page_param(p) for p in PAGES])
def test_page_code_runs(page: Path) -> None:
    missing = [m for m in NEEDS_EXTRAS.get(page.name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{page.name} uses {', '.join(missing)} (requirements-dev.txt), not installed")
    env = {}
    if page.name in NEEDS_ORT:
        from tests.helpers.ort import ort_venv_python, venv_dir

        env["ORT"] = ort_venv_python("1.19.2", venv_dir())
    result = run_check(page, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_block_runs_or_says_why() -> None:
    blocks = [b for page in PAGES for b in docs_code.blocks(page)]
    programs = [b for b in blocks if b.kind is not None]
    skipped = [b for b in programs if b.skip is not None]
    assert len(programs) > 40
    assert all(b.skip for b in skipped), "a skip marker names its reason"
    assert len(skipped) <= MAX_SKIPPED, [b.where() for b in skipped]
    # every page that runs code says where (a copy of the fixtures), so a reader can run it too
    for page in PAGES:
        runs = [b for b in docs_code.blocks(page) if b.kind and not b.skip]
        if runs and page.name != "README.md":
            assert docs_code.working_dir(page) == "tests/data/artifacts", page
            assert "tests/data/artifacts" in page.read_text(encoding="utf-8"), page


def test_the_markers_are_parsed(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-code: cwd tests/data/artifacts -->\n\n"
        "<!-- docs-code: skip: needs onnxruntime >= 1.20 -->\n```python\nimport nothing\n```\n\n"
        "<!-- docs-code: in . -->\n```sh\ntrue\n```\n\n    ```bash\n    echo indented\n    ```\n"
        "```json\n{}\n```\n",
        encoding="utf-8",
    )
    found = docs_code.blocks(page)
    assert [(b.language, b.kind, b.skip, b.cwd) for b in found] == [
        ("python", "python", "needs onnxruntime >= 1.20", None),
        ("sh", "shell", None, "."),
        ("bash", "shell", None, None),
        ("json", None, None, None),
    ]
    assert found[2].code == "echo indented\n"
    assert docs_code.working_dir(page) == "tests/data/artifacts"


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the README with one block changed."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert old in text
    page = tmp_path / "README.md"
    page.write_text(text.replace(old, new, 1), encoding="utf-8")
    return page


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("ortckpt.load(", "ortckpt.lod(", "AttributeError"),  # a Python block
        ("ortckpt inspect edited.ckpt", "ortckpt inspect missing.ckpt", "exit status 2"),  # a shell line
        (
            'ortckpt.save(state, "edited.ckpt")',
            'ortckpt.save(state, "tests/data/artifacts/trained.ckpt")',
            "overwrote or removed their inputs: tests/data/artifacts/trained.ckpt",
        ),
    ],
    ids=["python", "shell", "overwrites-input"],
)
def test_check_fails_on_a_broken_block(tmp_path: Path, old: str, new: str, says: str) -> None:
    page = _broken(tmp_path, old, new)
    result = run_check(page)
    assert result.returncode == 1, result.stdout + result.stderr
    assert says in result.stderr, result.stderr
    assert f"{page}:" in result.stderr  # the page and the block's line


def test_the_check_never_writes_into_the_repository(tmp_path: Path) -> None:
    """The blocks run on copies: the repository's fixtures are untouched by a page that writes."""
    before = {p: p.stat().st_mtime_ns for p in (REPO / "tests" / "data" / "artifacts").rglob("*")}
    shutil.copy(REPO / "docs" / "cli.md", tmp_path / "cli.md")
    assert run_check(tmp_path / "cli.md").returncode == 0
    assert {p: p.stat().st_mtime_ns for p in (REPO / "tests" / "data" / "artifacts").rglob("*")} == before
