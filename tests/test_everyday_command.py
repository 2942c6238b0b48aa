"""scripts/check.sh, the everyday test command, changes nothing outside the repository but caches.

The proof runs it whole in a mount namespace where the file system is read-only except the
repository, the temporary directory and the caches (``~/.cache``, cargo's registry and git
checkouts): any write elsewhere — an apt-get, a cargo install, a rustup target, a file in ``~`` —
fails it. That needs root (a mount namespace); the full test command runs it (it is ``slow``: the
whole everyday command again). A fast twin checks that no script it runs names an installing
command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

SCRIPTS = REPO / "scripts"
#: Commands that install or change things outside the repository.
INSTALLING = re.compile(
    r"\b(apt-get|apt|dpkg|cargo install|rustup (target|toolchain|component) add|pip install|uv pip|"
    r"setup_ort_env\.sh|setup_browser\.sh|build_web\.sh|build_wheels\.sh|npm|brew)\b"
)


def _scripts_run_by(script: Path) -> list[Path]:
    """``script`` and every script of scripts/ it runs (``bash scripts/X.sh``), transitively."""
    seen: list[Path] = []
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        for name in re.findall(r"bash scripts/([\w.-]+\.sh)", _commands(path)):
            todo.append(SCRIPTS / name)
    return seen


def _commands(path: Path) -> str:
    """The script without its comments and echoed messages."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        if not code.lstrip().startswith("echo"):
            lines.append(code)
    return "\n".join(lines)


def test_the_everyday_command_runs_no_installing_command() -> None:
    scripts = _scripts_run_by(SCRIPTS / "check.sh")
    assert SCRIPTS / "lint.sh" in scripts
    for script in scripts:
        found = INSTALLING.search(_commands(script))
        assert found is None, (script.name, found.group(0) if found else None)


def _writable() -> list[Path]:
    home = Path.home()
    cargo_home = Path(os.environ.get("CARGO_HOME", home / ".cargo"))
    candidates = [
        REPO,
        Path(tempfile.gettempdir()),
        home / ".cache",
        cargo_home / "registry",
        cargo_home / "git",
    ]
    return [p.resolve() for p in candidates if p.exists()]


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare(1) for a mount namespace (the full test command runs as root)",
)
def test_the_everyday_command_in_a_read_only_file_system() -> None:
    binds = "\n".join(f'mount --bind "{p}" "{p}"' for p in _writable())
    script = f"""set -e
{binds}
mount -o remount,bind,ro /
if touch /.ortckpt-write-probe 2>/dev/null; then echo "the root file system is writable" >&2; exit 3; fi
cd "{REPO}"
exec bash scripts/check.sh
"""
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=3600,
        stdin=subprocess.DEVNULL,
    )
    tail = (result.stdout[-6000:] + "\n--- stderr\n" + result.stderr[-6000:]).strip()
    assert result.returncode == 0, tail
    assert re.search(r"\d+ passed", result.stdout), tail
    assert "Read-only file system" not in result.stdout + result.stderr, tail
