"""The release pipeline (.github/workflows/): wheels for every platform the README names, tested on
their own platform, the sdist, the core crate, trusted publishing with attestations, and a
tag-driven release whose notes are the tag's CHANGELOG.md section (scripts/release_notes.py).
actionlint and zizmor check the workflows themselves (scripts/lint.sh; here too when installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import release_notes  # scripts/release_notes.py (scripts/ is an import root of the tests)

from tests.helpers.paths import REPO

# PyYAML reads the workflows (requirements-dev.txt); the lowest-dependencies run has only the floors
yaml = pytest.importorskip("yaml", reason="needs PyYAML (requirements-dev.txt) to read the workflows")

WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent


def workflow(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    return loaded


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def test_every_action_is_pinned_to_a_commit() -> None:
    for path in WORKFLOWS.glob("*.yml"):
        for uses in re.findall(r"uses:\s*(\S+)", path.read_text(encoding="utf-8")):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), (path.name, uses)


def test_wheels_for_every_platform() -> None:
    jobs = workflow("release.yml")["jobs"]
    linux = {entry["target"]: entry["runner"] for entry in jobs["linux"]["strategy"]["matrix"]["include"]}
    assert linux == {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}
    macos = {entry["target"]: entry["runner"] for entry in jobs["macos"]["strategy"]["matrix"]["include"]}
    assert set(macos) == {"x86_64", "aarch64"}
    for name in ("linux", "macos"):
        builds = [
            s["with"] for s in steps(jobs[name]) if s.get("uses", "").startswith("PyO3/maturin-action@")
        ]
        args = [b["args"] for b in builds]
        assert any("--features abi3" in a and "python3.11" in a for a in args), name
        assert any("--features abi3" not in a and "python3.10" in a for a in args), name
        if name == "linux":
            assert all(b["manylinux"] == "2014" for b in builds)
        else:
            assert all(b["target"] == "${{ matrix.target }}-apple-darwin" for b in builds)
    sdist = [s for s in steps(jobs["sdist"]) if s.get("uses", "").startswith("PyO3/maturin-action@")]
    assert sdist and sdist[0]["with"]["command"] == "sdist"


def test_the_suite_runs_on_each_platforms_wheel() -> None:
    test = workflow("release.yml")["jobs"]["test"]
    matrix = test["strategy"]["matrix"]
    wheels = {entry["runner"]: entry["wheels"] for entry in matrix["include"]}
    assert wheels == {
        "ubuntu-24.04": "wheels-linux-x86_64",
        "ubuntu-24.04-arm": "wheels-linux-aarch64",
        "macos-15-intel": "wheels-macos-x86_64",
        "macos-15": "wheels-macos-aarch64",
    }
    assert set(matrix["runner"]) == set(wheels) and matrix["python"] == ["3.10", "3.13"]
    assert set(test["needs"]) == {"linux", "macos"}
    run = " ".join(s.get("run", "") for s in steps(test))
    assert "--no-index --find-links dist ortckpt" in run and "python -m pytest" in run


def test_publishing_is_trusted_and_attested_and_tag_driven() -> None:
    release = workflow("release.yml")
    assert release[True]["push"]["tags"] == ["v*"]  # yaml reads the key `on` as True
    assert release["permissions"] == {}
    jobs = release["jobs"]
    for name in ("pypi", "crates-io", "github-release"):
        assert jobs[name]["if"] == "startsWith(github.ref, 'refs/tags/v')", name
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    publish = [s for s in steps(pypi) if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")]
    assert publish and publish[0]["with"] == {"attestations": True}  # no password: trusted publishing
    assert set(pypi["needs"]) == {"test", "sdist", "notes"}
    crates = jobs["crates-io"]
    assert crates["permissions"] == {"id-token": "write"}
    assert any(s.get("uses", "").startswith("rust-lang/crates-io-auth-action@") for s in steps(crates))
    assert "cargo publish -p ortckpt-core" in " ".join(s.get("run", "") for s in steps(crates))
    notes = " ".join(s.get("run", "") for s in steps(jobs["notes"]))
    assert "scripts/release_notes.py" in notes
    assert "--notes-file notes.md" in " ".join(s.get("run", "") for s in steps(jobs["github-release"]))


def test_ci_runs_the_full_test_command_and_packages_the_crate() -> None:
    jobs = workflow("ci.yml")["jobs"]
    assert "bash .ci/run" in " ".join(s.get("run", "") for s in steps(jobs["full"]))
    assert "cargo package -p ortckpt-core" in " ".join(s.get("run", "") for s in steps(jobs["crate"]))


def _repo_copy(tmp_path: Path, changelog: str, version: str = "1.2.3") -> Path:
    (tmp_path / "Cargo.toml").write_text(f'[workspace.package]\nversion = "{version}"\n', encoding="utf-8")
    (tmp_path / "CHANGELOG.md").write_text(changelog, encoding="utf-8")
    return tmp_path


def test_release_notes_are_the_tags_changelog_section(tmp_path: Path) -> None:
    repo = _repo_copy(
        tmp_path,
        "# Changelog\n\n## [Unreleased]\n\n"
        "## [1.2.3] - 2027-01-02\n\n### Added\n- a thing\n\n## [1.2.2]\n- old\n",
    )
    assert release_notes.notes_for_tag("v1.2.3", repo) == "### Added\n- a thing"
    with pytest.raises(ValueError, match=r"tag v1\.2\.4 is not v1\.2\.3"):
        release_notes.notes_for_tag("v1.2.4", repo)
    with pytest.raises(ValueError, match="lists no change"):
        release_notes.section((repo / "CHANGELOG.md").read_text(encoding="utf-8"), "Unreleased")
    empty = _repo_copy(tmp_path, "# Changelog\n\n## [Unreleased]\n- next\n")
    with pytest.raises(ValueError, match=r'no "## \[1\.2\.3\]" section'):
        release_notes.notes_for_tag("v1.2.3", empty)


def test_this_changelog_has_an_unreleased_section_and_the_version_is_the_packages() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.index("## [Unreleased]") < text.index("\n## [") + 2  # the first section
    assert release_notes.section(text, "Unreleased")
    import ortckpt

    assert ortckpt.__version__ == release_notes.workspace_version()


@pytest.mark.parametrize(
    "tool",
    [["actionlint"], ["zizmor", "--offline", "--persona=pedantic", "--no-progress"]],
    ids=lambda t: t[0],
)
def test_workflows_pass_actionlint_and_zizmor(tool: list[str]) -> None:
    exe = shutil.which(tool[0], path=str(BIN))
    if exe is None:
        pytest.skip(f"{tool[0]} is not installed in {BIN} (requirements-dev.txt has it)")
    result = subprocess.run(
        [exe, *tool[1:], *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
