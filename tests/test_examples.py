"""Every script in examples/ runs to completion (in a fresh interpreter, from a scratch directory)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
NEEDS = {"onnx_round_trip": "onnx"}


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    module = NEEDS.get(script.stem)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{script.name} needs {module}")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), f"{script.name} printed nothing"
    assert list(tmp_path.iterdir()) == [], "examples write only to their own temporary directory"


def test_readme_lists_every_example() -> None:
    """examples/README.md has a row for every script and every app folder."""
    folder = EXAMPLES[0].parent
    rows = [
        line
        for line in (folder / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `")
    ]
    listed = {line.split("`")[1].split()[0] for line in rows}
    apps = {f"{p.name}/" for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert listed == {p.name for p in EXAMPLES} | apps
