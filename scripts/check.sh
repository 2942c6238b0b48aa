#!/usr/bin/env bash
# The everyday test command: the lints that need nothing installed, the Rust core's tests, and the
# Python tests without the slowest tiers (`pytest -m "not slow and not ort"`). Arguments go to
# pytest (e.g. `bash scripts/check.sh tests/test_api.py` runs one file after the lints).
#
# Changes nothing outside the repository but caches (cargo's registry, pip's and the tools' own):
# no apt-get, no cargo install, no rustup target add, no side virtualenvs, nothing under ~ but
# caches. tests/test_everyday_command.py proves it by running this script with the file system
# read-only except the repository, the temporary directory and those caches. Needs scripts/setup.sh
# to have run (the tools and the built module live in .venv); no activation needed.
# The full run CI does is scripts/test.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ ! -x .venv/bin/python ]; then
  echo "check.sh: no .venv here; run 'bash scripts/setup.sh' first" >&2
  exit 1
fi
export PATH="$repo/.venv/bin:$PATH"

bash scripts/lint.sh
echo "== cargo test (the Rust core)"
cargo test -q -p ortckpt-core
echo "== pytest -m \"not slow and not ort\""
python -m pytest -q -m "not slow and not ort" "$@"
