#!/usr/bin/env bash
# Creates .venv (if missing), installs the development requirements and builds ortckpt into it
# (release mode, editable). Idempotent: a second run only rebuilds what changed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt

.venv/bin/maturin develop --release -q
