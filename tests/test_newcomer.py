"""What a newcomer meets first (issue 21): the docs site builds only without warnings and documents
every public name; the migration guide's code runs; the tests own their data; the README says what
the test command needs; ``build_wheels.sh`` works outside a git checkout; external data beside a
symlink's target."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import ortckpt
import ortckpt.compat
from tests.helpers.paths import CORPUS_DIR, DATA, REPO, corpus_files

DOCS = REPO / "docs"
API_PAGE = DOCS / "api.md"
MKDOCS = shutil.which("mkdocs", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
needs_mkdocs = pytest.mark.skipif(
    MKDOCS is None, reason="mkdocs is not installed (requirements-dev.txt has it)"
)


# -- the docs site -----------------------------------------------------------------------------------


def _nav_pages(mkdocs_yml: str) -> set[str]:
    return set(re.findall(r"^\s*- [^\n]*?:\s*([\w./-]+\.md)\s*$", mkdocs_yml, re.M))


def test_every_docs_page_is_in_the_nav() -> None:
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages, "no docs pages"
    assert _nav_pages((REPO / "mkdocs.yml").read_text(encoding="utf-8")) == pages


def _site_copy(dest: Path) -> Path:
    """What `scripts/build_docs.sh` reads, copied: mkdocs.yml, docs/, the hooks, python/ (for
    mkdocstrings) and the script itself."""
    for name in ("docs", "python"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    (dest / "scripts").mkdir()
    for name in ("build_docs.sh", "mkdocs_hooks.py"):
        shutil.copy(REPO / "scripts" / name, dest / "scripts" / name)
    shutil.copy(REPO / "mkdocs.yml", dest / "mkdocs.yml")
    return dest


def _build_docs(tree: Path, site: Path) -> subprocess.CompletedProcess[str]:
    assert MKDOCS is not None
    env = {**os.environ, "PATH": f"{Path(MKDOCS).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", str(tree / "scripts" / "build_docs.sh"), str(site)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@needs_mkdocs
def test_docs_step_fails_when_a_page_is_dropped_from_the_nav(tmp_path: Path) -> None:
    """The docs step of scripts/test.sh (scripts/build_docs.sh) fails on a warning: here the one a
    page left out of the nav gives (what `-q` used to hide)."""
    tree = _site_copy(tmp_path / "tree")
    yml = tree / "mkdocs.yml"
    text = yml.read_text(encoding="utf-8")
    dropped = "  - Federated learning server: federated.md\n"
    assert dropped in text
    yml.write_text(text.replace(dropped, ""), encoding="utf-8")
    result = _build_docs(tree, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert 'not included in the "nav"' in output and "federated.md" in output


def test_unrendered_table_rows_are_found() -> None:
    """The hook's rule: table rows that came out as paragraph text, never rows of real tables or of
    code blocks."""
    from mkdocs_hooks import broken_table_rows

    html = (
        "<p>text before</p><p>| <code>a</code> | b |\n| c | d |</p>"
        "<table><tr><td>a</td><td>b</td></tr></table><pre><code>| x | y |</code></pre><p>a | b</p>"
    )
    assert broken_table_rows(html) == ["| a | b |", "| c | d |"]


@needs_mkdocs
def test_docs_step_fails_on_a_table_that_does_not_render(tmp_path: Path) -> None:
    """A table whose rows are cut off from its header by a paragraph (as docs/federated.md's
    Conversions table once was) renders as `| a | b |` text: the build fails, naming the page."""
    tree = _site_copy(tmp_path / "tree")
    page = tree / "docs" / "federated.md"
    text = page.read_text(encoding="utf-8")
    row = "| `to_state_dict(src, *, include_optimizer_state=False) -> dict[str, ndarray]` |"
    assert row in text
    page.write_text(text.replace(row, "\nA paragraph in the way.\n" + row, 1), encoding="utf-8")
    result = _build_docs(tree, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "federated.md: a Markdown table did not render" in output and "to_state_dict" in output


@needs_mkdocs
def test_docs_build_passes_and_the_api_reference_is_complete(tmp_path: Path) -> None:
    """The real site builds with no warning, and its API page has an entry generated from the code
    for every public name of ortckpt and ortckpt.compat."""
    site = tmp_path / "site"
    result = _build_docs(_site_copy(tmp_path / "tree"), site)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    ids = set(re.findall(r'id="(ortckpt[\w.]*)"', (site / "api" / "index.html").read_text(encoding="utf-8")))
    errors = set(ortckpt.errors.__all__)
    for name in ortckpt.__all__:
        if name == "__version__":
            continue
        wanted = f"ortckpt.errors.{name}" if name in errors else f"ortckpt.{name}"
        assert wanted in ids, name
    for name in ortckpt.compat.__all__:
        assert f"ortckpt.compat.{name}" in ids, name


def test_api_page_names_every_public_name() -> None:
    """Fast twin of the build test: docs/api.md has a `:::` entry for every name of `ortckpt.__all__`
    (errors through the `ortckpt.errors` module) and `ortckpt.compat.__all__`, and links the compat
    page."""
    text = API_PAGE.read_text(encoding="utf-8")
    entries = set(re.findall(r"^::: ([\w.]+)$", text, re.M))
    covered_by_errors = set(ortckpt.errors.__all__) if "ortckpt.errors" in entries else set()
    missing = [
        n
        for n in ortckpt.__all__
        if n != "__version__" and f"ortckpt.{n}" not in entries and n not in covered_by_errors
    ]
    assert not missing
    assert "`ortckpt.__version__`" in text
    assert not [n for n in ortckpt.compat.__all__ if f"ortckpt.compat.{n}" not in entries]
    assert "(compat.md)" in text


# -- the migration guide -----------------------------------------------------------------------------


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)


def test_migration_guide_starts_with_compat() -> None:
    text = (DOCS / "migration.md").read_text(encoding="utf-8")
    blocks = _python_blocks(DOCS / "migration.md")
    assert "from ortckpt.compat import CheckpointState" in blocks[0]
    assert "for name, param in state.parameters:" in blocks[0]
    assert text.index("ortckpt.compat") < text.index("from ortckpt import CheckpointState")


def test_migration_guide_code_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every Python block of the migration guide, in order, on a copy of a checkpoint ORT wrote:
    the compat block leaves ORT's loop as it is and halves the trainable parameters.
    (scripts/docs_code.py runs every page's blocks too; this checks what the first one did.)"""
    ckpt = tmp_path / "trained.ckpt"
    shutil.copy(DATA / "artifacts" / "trained.ckpt", ckpt)
    before = ortckpt.load(ckpt, mmap=False).to_numpy()
    blocks = _python_blocks(DOCS / "migration.md")
    assert len(blocks) >= 2
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(blocks[0], "migration.md[compat]", "exec"), {})
        lines = capsys.readouterr().out.splitlines()
        # ORT's pairs: whole names, never a name split into letters
        assert [line.split()[0] for line in lines] == sorted(before)
        after = ortckpt.load(tmp_path / "halved.ckpt", mmap=False)
        for name, param in after.parameters.items():
            factor = 0.5 if param.trainable else 1.0
            np.testing.assert_array_equal(param.data, before[name] * np.float32(factor))
        assert after.properties["epoch"] == 5 and after.optimizer is None  # ORT's default: no optimizer state
        for i, block in enumerate(blocks[1:], 1):
            exec(compile(block, f"migration.md[{i}]", "exec"), {})
        np.testing.assert_array_equal(ortckpt.load(ckpt).to_numpy()["fc2.weight"], before["fc2.weight"])
    finally:
        os.chdir(cwd)


def test_compat_page_is_linked_from_the_guides() -> None:
    for page in ("index.md", "migration.md", "api.md"):
        assert "(compat.md" in (DOCS / page).read_text(encoding="utf-8"), page


# -- test data owned by the repository ---------------------------------------------------------------


def test_corpus_lives_in_the_repository() -> None:
    assert CORPUS_DIR == REPO / "tests" / "data" / "corpus"
    files = corpus_files()
    assert len(files) == 6
    for f in files:
        assert f.with_suffix(".json").is_file(), f
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "tests/data/corpus"], capture_output=True, text=True
    )
    if tracked.returncode == 0:  # a git checkout: the files are committed, not just present here
        assert {Path(p).name for p in tracked.stdout.split()} >= {f.name for f in files}


def test_no_test_reaches_outside_the_repository() -> None:
    """No test, helper or test script points at `../shared` (or another folder beside the clone)."""
    roots = [REPO / "tests", REPO / "scripts", REPO / "rust" / "core", REPO / "fuzz" / "tests"]
    pattern = re.compile(r"\.\./shared|\.\./\.\./\.\./shared|parent\s*/\s*\"shared\"")
    offenders = [
        str(p.relative_to(REPO))
        for root in roots
        for p in root.rglob("*")
        if p.suffix in {".py", ".rs", ".sh"} and "target" not in p.parts and p != Path(__file__).resolve()
        if pattern.search(p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not offenders


def test_skip_reasons_are_shown() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    addopts = re.search(r"^addopts = (\[.*\])$", text, re.M)
    assert addopts is not None
    # -r with "s": every skip and its reason in the summary (with "fE": failures and errors too)
    report = [opt for opt in ast.literal_eval(addopts.group(1)) if opt.startswith("-r")]
    assert report and "s" in report[0]


def test_a_skip_shows_its_reason_in_the_summary(tmp_path: Path) -> None:
    """pytest run with the project's options prints each skip with its reason."""
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\ndef test_x():\n    pytest.skip('the reason is shown')\n", encoding="utf-8"
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_skipping.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "SKIPPED" in result.stdout and "the reason is shown" in result.stdout, result.stdout


# -- README: install today, what the test command needs ---------------------------------------------


def _readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end != -1 else None]


def test_readme_install_is_true_today() -> None:
    """The README says ortckpt is not on PyPI yet and what will work after the first release; no
    page of the README or the docs gives a command that installs ortckpt from PyPI today."""
    install = _readme_section("## Install")
    assert "not on PyPI" in install and "After the first release" in install
    commands = re.findall(r"^pip install (\S+)", install, re.M)
    assert commands and all(c.startswith(("'.", ".")) for c in commands)
    from_pypi = re.compile(r"^\s*pip install ['\"]?ortckpt", re.M)
    for page in [REPO / "README.md", *DOCS.glob("*.md")]:
        for block in re.findall(
            r"^```(?:sh|bash|shell)\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S
        ):
            assert not from_pypi.search(block), (page.name, block)


def test_readme_first_screen_and_length() -> None:
    """The first screen says what ortckpt is and for whom, then install and a quick start; the rest
    lives in the docs (150 lines at most)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first_screen = text[: text.index("## Documentation")]
    for words in ("onnxruntime-training", "Federated-learning servers", "## Install", "## Quick start"):
        assert words in first_screen, words
    assert "tests/data/artifacts/trained.ckpt" in _readme_section("## Quick start")


def test_readme_names_both_test_commands_with_measured_figures() -> None:
    """Both test commands are in the README with their time, what they install and their disk use;
    CI runs the full one; the details are in docs/development.md."""
    dev = _readme_section("## Development")
    assert "scripts/check.sh" in dev and "scripts/test.sh" in dev
    assert not re.search(r"[A-Z]+_(TIME|DISK)", dev), "a figure left unmeasured"
    assert re.search(r"\d+ min", dev) and re.search(r"\d+(\.\d+)? GB", dev)
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    details = (DOCS / "development.md").read_text(encoding="utf-8")
    for fact in (
        "pyenv",
        "3.10\u20133.13",
        "cargo-fuzz",
        "apt-get install",
        "rustup target add",
        "~/.cache",
        "PyPI",
        "crates.io",
    ):
        assert fact in details, fact
    assert not re.search(r"[A-Z]+_(TIME|DISK)", details), "a figure left unmeasured"
    # the fuzz script installs cargo-fuzz globally, as the page says
    assert "cargo install cargo-fuzz" in (REPO / "scripts" / "fuzz.sh").read_text(encoding="utf-8")


def test_every_pytest_marker_is_documented() -> None:
    line = re.search(r"^markers = \[(.*)\]$", (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert line is not None
    markers = re.findall(r'"(\w+):', line.group(1))
    table = (DOCS / "development.md").read_text(encoding="utf-8").split("## pytest markers")[1]
    assert markers and all(f"| `{m}` |" in table for m in markers)


# -- build_wheels.sh outside a git checkout ----------------------------------------------------------


def _list_sources(tree: Path) -> list[str]:
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    result = subprocess.run(
        ["bash", "scripts/build_wheels.sh", "--list-sources"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_build_wheels_lists_sources_from_an_unpacked_sdist(tmp_path: Path) -> None:
    """The sdist carries build_wheels.sh (and what it needs); unpacked, without .git, its listing
    step runs and names the sources."""
    maturin = Path(sys.executable).parent / "maturin"
    if not maturin.exists():
        pytest.skip(f"maturin is not installed beside {sys.executable} (scripts/setup.sh installs it)")
    subprocess.run([str(maturin), "sdist", "-o", str(tmp_path)], cwd=REPO, check=True, capture_output=True)
    (sdist,) = tmp_path.glob("ortckpt-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (tree,) = (tmp_path / "x").iterdir()
    assert not (tree / ".git").exists()
    for needed in ("scripts/build_wheels.sh", "scripts/setup.sh", "requirements-dev.txt"):
        assert (tree / needed).is_file(), needed
    listed = _list_sources(tree)
    for needed in ("pyproject.toml", "Cargo.lock", "rust/python/src/lib.rs", "python/ortckpt/__init__.py"):
        assert needed in listed, needed


def test_build_wheels_lists_what_git_would(tmp_path: Path) -> None:
    """In a checkout the listing equals git's (tracked and untracked, ignored files left out), and
    in a copy without .git it is the same."""
    git = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", "Cargo.toml", "Cargo.lock", "pyproject.toml",
         "README.md", "LICENSE", "CHANGELOG.md", "rust/core", "rust/python", "python"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if git.returncode != 0:
        pytest.skip("not a git checkout: nothing to compare the listing with")
    expected = sorted((p for p in git.stdout.split() if "__pycache__" not in p), key=lambda p: p.encode())
    assert _list_sources(REPO) == expected
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy(REPO / name, copy / name)
    for name in ("rust/core", "rust/python", "python", "scripts"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("target"))
    assert _list_sources(copy) == expected


# -- external data of a symlinked checkpoint ---------------------------------------------------------


def _external_state() -> ortckpt.CheckpointState:
    return ortckpt.CheckpointState(
        {"w": np.arange(64, dtype=np.float32).reshape(8, 8)}, frozen={"b": np.ones(16, np.float32)}
    )


def test_symlinked_checkpoint_finds_data_beside_the_target(tmp_path: Path) -> None:
    store, links = tmp_path / "store", tmp_path / "links"
    store.mkdir()
    links.mkdir()
    target = store / "model.ckpt"
    ortckpt.save(_external_state(), target, external_data_threshold=0)
    assert ortckpt.external_data_path(target) == f"{target}.data" and Path(f"{target}.data").exists()
    link = links / "model.ckpt"
    link.symlink_to(os.path.relpath(target, links))
    state = ortckpt.load(link)
    assert state.has_external_data
    np.testing.assert_array_equal(state.parameters["w"].data, np.arange(64, dtype=np.float32).reshape(8, 8))
    # a save through the link keeps the pair together, beside the target
    state.parameters["w"].data = state.parameters["w"].data * 2
    ortckpt.save(state, link)
    assert sorted(os.listdir(links)) == ["model.ckpt"] and link.is_symlink()
    for path in (link, target):
        np.testing.assert_array_equal(ortckpt.load(path).parameters["w"].data[0], np.arange(8) * 2)


def test_data_beside_the_link_wins_when_it_exists(tmp_path: Path) -> None:
    """ORT's rule `<path>.data` stays first: a store of links (one link per file, as model caches
    keep them) pairs the two files whatever their targets are called."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snap.mkdir()
    ortckpt.save(_external_state(), blobs / "tmp.ckpt", external_data_threshold=0)
    os.rename(blobs / "tmp.ckpt", blobs / "aaa")
    os.rename(blobs / "tmp.ckpt.data", blobs / "bbb")
    (snap / "model.ckpt").symlink_to(blobs / "aaa")
    (snap / "model.ckpt.data").symlink_to(blobs / "bbb")
    state = ortckpt.load(snap / "model.ckpt", mmap=False)
    np.testing.assert_array_equal(state.parameters["b"].data, np.ones(16, np.float32))
