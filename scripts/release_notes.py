#!/usr/bin/env python3
"""The notes of a release, from CHANGELOG.md, and the checks a tag must pass first.

    python3 scripts/release_notes.py vX.Y.Z OUT     # the tag's section; fails unless the tag is the
                                                   # workspace version and the section has entries
    python3 scripts/release_notes.py --unreleased OUT   # the "Unreleased" section (runs without a tag)

Releasing: rename CHANGELOG.md's "## [Unreleased]" to "## [X.Y.Z] - YYYY-MM-DD" (a new empty
"Unreleased" above it), set `version` in Cargo.toml's `[workspace.package]` to X.Y.Z, commit, and
push the tag vX.Y.Z: .github/workflows/release.yml builds, tests and publishes, with this section
as the GitHub release's notes. Standard library only (it runs before anything is installed).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def workspace_version(repo: Path = REPO) -> str:
    """``version`` of Cargo.toml's ``[workspace.package]`` (read without tomllib: Python 3.10 runs this)."""
    text = (repo / "Cargo.toml").read_text(encoding="utf-8")
    table = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    version = re.search(r'^version\s*=\s*"([^"]+)"', table.group(1) if table else "", re.M)
    if version is None:
        raise ValueError("Cargo.toml has no [workspace.package] version")
    return version.group(1)


def section(changelog: str, title: str) -> str:
    """The text under ``## [title]`` (up to the next ``## ``), stripped; ValueError if absent or empty."""
    match = re.search(rf"^## \[{re.escape(title)}\][^\n]*\n(.*?)(?=^## |\Z)", changelog, re.M | re.S)
    if match is None:
        raise ValueError(f'CHANGELOG.md has no "## [{title}]" section')
    body = match.group(1).strip()
    if not re.search(r"^- ", body, re.M):
        raise ValueError(f'CHANGELOG.md\'s "## [{title}]" section lists no change')
    return body


def notes_for_tag(tag: str, repo: Path = REPO) -> str:
    version = workspace_version(repo)
    if tag != f"v{version}":
        raise ValueError(f"tag {tag} is not v{version}, the version in Cargo.toml")
    return section((repo / "CHANGELOG.md").read_text(encoding="utf-8"), version)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tag", nargs="?", help="the release tag, vX.Y.Z")
    ap.add_argument("out", help="where to write the notes")
    ap.add_argument("--unreleased", action="store_true", help='the "Unreleased" section instead')
    args = ap.parse_args(argv)
    try:
        if args.unreleased:
            notes = section((REPO / "CHANGELOG.md").read_text(encoding="utf-8"), "Unreleased")
        elif args.tag:
            notes = notes_for_tag(args.tag)
        else:
            ap.error("give a tag or --unreleased")
    except ValueError as exc:
        print(f"release_notes.py: {exc}", file=sys.stderr)
        return 1
    Path(args.out).write_text(notes + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(notes.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
