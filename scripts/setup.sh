#!/usr/bin/env bash
# Creates .venv (if missing), installs the development requirements and builds ortckpt into it
# (release mode, editable), then builds what the everyday test command (scripts/check.sh) compiles.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt

.venv/bin/maturin develop --release -q
# The Rust side of the everyday test command (scripts/check.sh), built now so that it only runs:
# clippy's dependencies (checked once) and the core's test binaries.
cargo check -q --all-targets
cargo test -q -p ortckpt-core --no-run
