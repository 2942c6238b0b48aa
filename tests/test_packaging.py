"""Package metadata and the public surface: version in sync with Cargo, declared floors in sync
with what the lowest-direct CI run installs, no leaked names, the notebook representation."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup

REPO = Path(__file__).resolve().parents[1]


def _cargo_workspace_version() -> str:
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    match = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    assert match, "no version in [workspace.package]"
    return match.group(1)


def test_version_matches_cargo_workspace() -> None:
    # maturin takes the wheel's version from Cargo.toml; ortckpt.__version__ is a constant
    assert ortckpt.__version__ == _cargo_workspace_version()


def test_installed_metadata_version_matches() -> None:
    from importlib.metadata import version

    assert version("ortckpt") == ortckpt.__version__


def test_public_namespace_is_exactly_all() -> None:
    public = {name for name in vars(ortckpt) if not name.startswith("_")}
    submodules = {"errors", "io", "onnx_io", "state", "cli", "compat", "conversions", "aggregate", "adapters"}
    submodules |= {"flower"}  # ortckpt.flower, when imported (it needs the 'flower' extra)
    submodules |= {"formats", "deploy", "federated"}  # the packages grouped by concern, when imported
    assert public - submodules <= set(ortckpt.__all__), public - submodules - set(ortckpt.__all__)
    assert "version" not in vars(ortckpt)


def test_the_public_modules_keep_their_import_paths() -> None:
    """``ortckpt.conversions``, ``onnx_io``, ``adapters``, ``aggregate`` and ``flower`` are where
    they were before the package was grouped by concern: importable, reachable as attributes after
    a bare ``import ortckpt`` (not ``flower``: it needs its extra), exporting their module's names."""
    code = (
        "import importlib, sys, ortckpt\n"
        "moved = {'conversions': 'formats', 'onnx_io': 'formats', 'adapters': 'deploy',\n"
        "         'aggregate': 'federated'}\n"
        "for name, group in moved.items():\n"
        "    public, real = getattr(ortckpt, name), importlib.import_module(f'ortckpt.{group}.{name}')\n"
        "    assert public is sys.modules[f'ortckpt.{name}'], name\n"
        "    assert public.__all__ == real.__all__ and public.__all__, name\n"
        "    assert all(getattr(public, n) is getattr(real, n) for n in real.__all__), name\n"
        "assert ortckpt.onnx_io.save_from_onnx is ortckpt.save_from_onnx\n"
        "try:\n"
        "    ortckpt.flower\n"
        "except AttributeError:\n"
        "    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "ok"
    pytest.importorskip("flwr", reason="ortckpt.flower needs the 'flower' extra")
    import ortckpt.federated.flower
    import ortckpt.flower

    assert ortckpt.flower.__all__ == ortckpt.federated.flower.__all__
    assert all(
        getattr(ortckpt.flower, n) is getattr(ortckpt.federated.flower, n) for n in ortckpt.flower.__all__
    )


def test_import_does_not_load_optional_or_slow_modules() -> None:
    code = (
        "import sys, ortckpt\n"
        "unwanted = ('onnx', 'importlib.metadata', 'argcomplete', 'ortckpt.cli', 'ortckpt.onnx_io', 'flwr',\n"
        "            'ortckpt.formats', 'ortckpt.deploy', 'ortckpt.federated')\n"
        "bad = [m for m in unwanted if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_license_and_changelog_exist() -> None:
    assert "MIT License" in (REPO / "LICENSE").read_text()
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.cells.append(data)


def test_repr_html_is_a_compact_escaped_table() -> None:
    state = CheckpointState(
        {"fc<1>.weight": np.zeros((4, 8), np.float32)},
        frozen={"b": np.zeros(3, np.float64)},
        properties={"note": "<script>", "epoch": 3},
        optimizer={"group0": OptimizerGroup(step=7, initial_learning_rate=0.001)},
    )
    html = state._repr_html_()
    parser = _Cells()
    parser.feed(html)
    assert "script" not in parser.tags  # escaped, not markup
    text = "".join(parser.cells)
    assert "fc<1>.weight" in text and "'<script>'" in text
    for needle in ["trainable", "frozen", "float32", "float64", "[4, 8]", "128 B", "step 7", "epoch"]:
        assert needle in text, needle
    assert parser.tags.count("table") == 2


def test_repr_html_caps_rows() -> None:
    from ortckpt._html import MAX_ROWS

    state = CheckpointState({f"p{i}": np.zeros(1, np.float32) for i in range(MAX_ROWS + 5)})
    html = state._repr_html_()
    assert html.count("<tr>") == 1 + MAX_ROWS + 1  # header, MAX_ROWS parameters, "… N more"
    assert "… 5 more" in html


def test_repr_html_caps_every_section() -> None:
    """100,000 properties and optimizer groups, and names of a megabyte, from an untrusted
    checkpoint: the table stays small (it was 9.5 MiB for the properties alone)."""
    from ortckpt._html import MAX_ROWS, MAX_TEXT

    long = "n" * (1 << 20)
    state = CheckpointState(
        {long: np.zeros(1, np.float32)},
        properties={f"p{i}": "v" * 300 for i in range(100_000)},
        optimizer={f"g{i}": OptimizerGroup(step=i, initial_learning_rate=0.1) for i in range(5_000)},
    )
    html = state._repr_html_()
    assert len(html) < 64 << 10, len(html)
    assert "… 99960 more" in html and "… 4960 more" in html
    assert f"… ({(1 << 20) - MAX_TEXT} more characters)" in html
    assert html.count("<code>g") == MAX_ROWS
    text = repr(state)  # the plain repr lists names too: ten of each, then a count
    assert len(text) < 2048 and "… 99990 more" in text and "… 4990 more" in text


def test_repr_html_of_a_loaded_ort_checkpoint() -> None:
    path = REPO / "tests" / "data" / "mlp_adamw_with_optimizer.ckpt"
    html = ortckpt.load(path)._repr_html_()
    assert "fc1.weight" in html and "group0" in html and "from <code>" in html
