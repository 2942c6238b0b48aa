#!/usr/bin/env bash
# Builds the documentation site (mkdocs.yml) into OUT (default: a new temporary directory) in
# strict mode: any warning fails the build — a page left out of the nav, a broken link or anchor,
# an API reference that does not resolve. No -q: with -q MkDocs drops warnings before strict mode
# counts them, and the build passes whatever they say (tests/test_newcomer.py proves this script
# fails when a page is dropped from the nav).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# the project's venv (scripts/setup.sh), found here: no activation needed
if [ -x "$repo/.venv/bin/mkdocs" ]; then
  export PATH="$repo/.venv/bin:$PATH"
fi
out=${1:-$(mktemp -d)}
NO_MKDOCS_2_WARNING=1 mkdocs build --strict -d "$out"
